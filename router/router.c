/*
 * router.c - next-hop lookup in an LMDB table (routes.mdb).
 *
 * PURPOSE   Map a recipient address to its route: address key, domain key,
 *           ".parent" wildcard keys from the nearest up, then the default.
 * CONTRACT  One environment file opened with MDB_NOSUBDIR ("<path>" plus
 *           "<path>-lock"), 256 MiB map, the unnamed main database; keys
 *           are lower-case, values are route texts checked by route_parse()
 *           before they are written.  MDB_NOTLS because the read
 *           transaction outlives a call: it is begun once, reset after each
 *           lookup (releasing its snapshot, so writers never wait on an idle
 *           worker) and renewed before the next one, which is what makes a
 *           write committed by another process visible at the next lookup.
 *           Lookups copy the candidate keys into a stack buffer and the
 *           result into the caller's struct: no allocation, no syscall
 *           beyond what mdb_txn_renew does (none on Linux: the reader slot
 *           is kept).  Writers (master at start, mtactl) use one write
 *           transaction per call, or one per batch (router_begin/commit).
 * FAILURE   Never logs.  ROUTER_OK or ROUTER_E*; router_errstr() holds the
 *           failing call and the reason (valid until the next call).
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <lmdb.h>

#include "router/router.h"
#include "router/router_int.h"

#define ROUTER_MAPSIZE     ((size_t)256 << 20)
#define ROUTER_MAXREADERS  1024     /* workers + mtactl, with room to spare */
#define ROUTER_MODE        0600     /* root's: no worker opens the live db */
#define ROUTER_ADDR_MAX    512      /* longer addresses cannot match a key */
#define ROUTER_MAXDBS      8        /* named databases: ROUTER_TLS_DB, room */



static const char router_closed_err[] = "router not open";

int
router_fail(struct router *r, int rc, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(r->err, sizeof(r->err), fmt, ap);
    va_end(ap);
    return rc;
}


/* router_is_side - is main-table key k the record of a side table? */
int
router_is_side(const MDB_val *k)
{
    return (k->mv_size == sizeof(ROUTER_TLS_DB) - 1 &&
        memcmp(k->mv_data, ROUTER_TLS_DB, k->mv_size) == 0) ||
        (k->mv_size == sizeof(ROUTER_POOL_DB) - 1 &&
        memcmp(k->mv_data, ROUTER_POOL_DB, k->mv_size) == 0);
}


/* router_mdb_rc - an LMDB return code as ROUTER_ESYS (errno) or _EDB. */
int
router_mdb_rc(int mrc)
{
    if (mrc > 0) {                  /* LMDB passes errno values through */
        errno = mrc;
        return ROUTER_ESYS;
    }
    return ROUTER_EDB;
}


/* router_plain_file - LMDB opens path and its -lock by name (following
 * links); refuse a link or a hard-linked file there first, so no process
 * that opens the db as root (master, a worker before its drop) writes
 * through one.  The directory is checked by the master (safefs). */
static int
router_plain_file(struct router *r, const char *path)
{
    struct stat st;

    if (lstat(path, &st) == -1)
        return errno == ENOENT ? 0 : router_fail(r, ROUTER_ESYS,
            "routes db %s: %s", path, strerror(errno));
    if (S_ISREG(st.st_mode) && st.st_nlink == 1)
        return 0;
    errno = ELOOP;
    return router_fail(r, ROUTER_ESYS, "routes db %s: %s; refusing it", path,
        S_ISLNK(st.st_mode) ? "is a symbolic link" : S_ISREG(st.st_mode) ?
        "has more than one hard link" : "not a regular file");
}

/* router_open_side - a named side table (the TLS policies, the sender
 * pools): created by a writer, opened by a reader when it exists (else
 * *have stays 0: no entries). */
static int
router_open_side(struct router *r, int create, const char *name,
    MDB_dbi *dbi, int *have)
{
    int      rdonly = (create & (ROUTER_OPEN_RDONLY |
                                 ROUTER_OPEN_SNAPSHOT)) != 0;
    MDB_txn *txn;
    int      mrc;

    if ((mrc = mdb_txn_begin(r->env, NULL, rdonly ? MDB_RDONLY : 0,
        &txn)) != 0)
        return mrc;
    mrc = mdb_dbi_open(txn, name, rdonly ? 0 : MDB_CREATE, dbi);
    if (mrc == MDB_NOTFOUND && rdonly) {
        mdb_txn_abort(txn);
        return 0;
    }
    if (mrc != 0) {
        mdb_txn_abort(txn);
        return mrc;
    }
    if ((mrc = mdb_txn_commit(txn)) != 0)
        return mrc;
    *have = 1;
    return 0;
}


int
router_open(struct router **rp, const char *path, const char *default_route,
    int create)
{
    char lock[PATH_MAX];
    struct router *r;
    struct stat st;
    MDB_txn *txn;
    char    why[256];
    int     mrc;

    if ((r = calloc(1, sizeof(*r))) == NULL) {
        *rp = NULL;
        return ROUTER_ESYS;
    }
    *rp = r;
    if (default_route != NULL) {
        if (strlen(default_route) > ROUTE_VALUE_MAX ||
            route_parse(default_route, &r->default_route, why,
            sizeof(why)) == -1)
            return router_fail(r, ROUTER_EINVAL, "routes.default '%.60s': %s",
                default_route, strlen(default_route) > ROUTE_VALUE_MAX ?
                "too long" : why);
        memcpy(r->default_value, default_route, strlen(default_route) + 1);
        r->has_default = 1;
    }
    if (!(create & ROUTER_OPEN_CREATE) && stat(path, &st) == -1)
        return router_fail(r, ROUTER_ESYS, "routes db %s: %s", path,
            strerror(errno));
    if ((size_t)snprintf(lock, sizeof(lock), "%s-lock", path) >= sizeof(lock))
        return router_fail(r, ROUTER_EINVAL, "routes db %s: path too long",
            path);
    if (router_plain_file(r, path) != 0 || router_plain_file(r, lock) != 0)
        return ROUTER_ESYS;
    if ((mrc = mdb_env_create(&r->env)) != 0)
        return router_fail(r, router_mdb_rc(mrc), "mdb_env_create: %s",
            mdb_strerror(mrc));
    if ((mrc = mdb_env_set_mapsize(r->env, ROUTER_MAPSIZE)) != 0 ||
        (mrc = mdb_env_set_maxreaders(r->env, ROUTER_MAXREADERS)) != 0 ||
        (mrc = mdb_env_set_maxdbs(r->env, ROUTER_MAXDBS)) != 0)
        goto fail;
    if ((mrc = mdb_env_open(r->env, path, MDB_NOSUBDIR | MDB_NOTLS |
        ((create & ROUTER_OPEN_RDONLY) ? MDB_RDONLY : 0) |
        ((create & ROUTER_OPEN_SNAPSHOT) ? MDB_RDONLY | MDB_NOLOCK : 0),
        ROUTER_MODE)) != 0)
        goto fail;
    /* The main database always exists; its handle stays valid after the
     * opening transaction ends. */
    if ((mrc = mdb_txn_begin(r->env, NULL, MDB_RDONLY, &txn)) != 0)
        goto fail;
    if ((mrc = mdb_dbi_open(txn, NULL, 0, &r->dbi)) != 0) {
        mdb_txn_abort(txn);
        goto fail;
    }
    if ((mrc = mdb_txn_commit(txn)) != 0)
        goto fail;
    if ((mrc = router_open_side(r, create, ROUTER_TLS_DB, &r->tls_dbi,
        &r->have_tls)) != 0 || (mrc = router_open_side(r, create,
        ROUTER_POOL_DB, &r->pool_dbi, &r->have_pool)) != 0)
        goto fail;
    router_reader_check(r);         /* slots left by killed processes */
    r->err[0] = '\0';
    return ROUTER_OK;
fail:
    router_fail(r, router_mdb_rc(mrc), "routes db %s: %s", path,
        mdb_strerror(mrc));
    mdb_env_close(r->env);          /* keep err, drop the half-open env */
    r->env = NULL;
    return router_mdb_rc(mrc);
}


void
router_close(struct router *r)
{
    if (r == NULL)
        return;
    if (r->wtxn != NULL)
        mdb_txn_abort(r->wtxn);
    if (r->rtxn != NULL)
        mdb_txn_abort(r->rtxn);
    if (r->env != NULL)
        mdb_env_close(r->env);
    free(r);
}


int
router_reopen(struct router *r, const char *path, int flags)
{
    struct router *n;
    int            rc;

    if ((rc = router_open(&n, path, NULL, flags)) != ROUTER_OK) {
        snprintf(r->err, sizeof(r->err), "%s", router_errstr(n));
        router_close(n);
        return rc;                  /* r keeps the table it had */
    }
    if (r->rtxn != NULL)            /* reset between lookups: no view held */
        mdb_txn_abort(r->rtxn);
    r->rtxn = NULL;
    if (r->wtxn != NULL)
        mdb_txn_abort(r->wtxn);
    r->wtxn = NULL;
    if (r->env != NULL)
        mdb_env_close(r->env);
    r->env = n->env;
    r->dbi = n->dbi;
    r->tls_dbi = n->tls_dbi;
    r->have_tls = n->have_tls;
    r->pool_dbi = n->pool_dbi;
    r->have_pool = n->have_pool;
    r->err[0] = '\0';
    n->env = NULL;
    router_close(n);
    return ROUTER_OK;
}


int
router_snapshot(struct router *r, int fd)
{
    int mrc;

    if (r->env == NULL)
        return router_fail(r, ROUTER_EDB, "%s", router_closed_err);
    /* MDB_CP_COMPACT walks one read transaction: it never takes the
     * writer mutex, so a long batch of another writer does not stall it */
    if ((mrc = mdb_env_copyfd2(r->env, fd, MDB_CP_COMPACT)) != 0)
        return router_fail(r, router_mdb_rc(mrc), "snapshot: %s",
            mdb_strerror(mrc));
    return ROUTER_OK;
}


int
router_snapshot_path(const char *db, char *dir, size_t dirsz, char *file,
    size_t filesz)
{
    if ((size_t)snprintf(dir, dirsz, "%s" ROUTER_SNAP_DIR, db) >= dirsz ||
        (size_t)snprintf(file, filesz, "%s" ROUTER_SNAP_DIR "/"
        ROUTER_SNAP_FILE, db) >= filesz) {
        errno = ENAMETOOLONG;
        return ROUTER_ESYS;
    }
    return ROUTER_OK;
}


const char *
router_errstr(const struct router *r)
{
    return r != NULL ? r->err : router_closed_err;
}


/* router_rbegin - the read txn, begun once and renewed after each reset. */
int
router_rbegin(struct router *r)
{
    int mrc;

    if (r->env == NULL)
        return router_fail(r, ROUTER_EDB, "%s", router_closed_err);
    if (r->rtxn == NULL)
        mrc = mdb_txn_begin(r->env, NULL, MDB_RDONLY, &r->rtxn);
    else
        mrc = mdb_txn_renew(r->rtxn);
    if (mrc != 0) {
        if (r->rtxn != NULL) {
            mdb_txn_abort(r->rtxn);  /* begin afresh next time */
            r->rtxn = NULL;
        }
        return router_fail(r, router_mdb_rc(mrc), "read transaction: %s",
            mdb_strerror(mrc));
    }
    return ROUTER_OK;
}


/* router_get - look up one candidate key in the open read txn. */
static int
router_get(struct router *r, const char *k, size_t n, MDB_val *val)
{
    MDB_val key;

    if (n == 0 || n > ROUTE_KEY_MAX)
        return MDB_NOTFOUND;        /* no such key can be stored */
    key.mv_data = (void *)k;
    key.mv_size = n;
    return mdb_get(r->rtxn, r->dbi, &key, val);
}


/* router_found - copy a match into res (before the txn is reset). */
static int
router_found(struct router *r, enum router_match m, const char *k, size_t n,
    const MDB_val *val, struct router_result *res)
{
    char why[256];

    res->match = m;
    if (n >= sizeof(res->key))
        n = sizeof(res->key) - 1;
    memcpy(res->key, k, n);
    res->key[n] = '\0';
    if (val->mv_size >= sizeof(res->value))
        return router_fail(r, ROUTER_EINVAL, "stored route for key '%s' is "
            "too long", res->key);
    memcpy(res->value, val->mv_data, val->mv_size);
    res->value[val->mv_size] = '\0';
    if (route_parse(res->value, &res->route, why, sizeof(why)) == -1)
        return router_fail(r, ROUTER_EINVAL, "stored route for key '%s' is "
            "malformed: %s", res->key, why);
    return ROUTER_OK;
}


/* router_lower - ASCII lower-case copy of n bytes. */
static void
router_lower(char *dst, const char *src, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        char c = src[i];

        dst[i] = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
    }
}


/*
 * router_search - the lookup order over the lower-cased address in buf:
 * the whole address, then its domain, then ".parent" suffixes of the
 * domain from the nearest up.  1 when matched (res filled), 0 when not,
 * negative on error.
 */
static int
router_search(struct router *r, const char *buf, size_t n, int whole,
    struct router_result *res)
{
    const char *at, *dom, *p;
    size_t      dn;
    MDB_val     val;
    int         mrc;

    if (whole) {
        mrc = router_get(r, buf, n, &val);
        if (mrc == 0)
            return router_found(r, ROUTER_MATCH_ADDRESS, buf, n, &val, res)
                == ROUTER_OK ? 1 : ROUTER_EINVAL;
        if (mrc != MDB_NOTFOUND)
            goto fail;
    }
    if ((at = memrchr(buf, '@', n)) == NULL)
        return 0;                   /* "postmaster": address key only */
    dom = at + 1;
    dn = (size_t)(buf + n - dom);
    if (dn > 0 && dom[dn - 1] == '.')
        dn--;                       /* "example.org." is example.org */
    if (dn == 0 || dom[0] == '.')
        return 0;
    mrc = router_get(r, dom, dn, &val);
    if (mrc == 0)
        return router_found(r, ROUTER_MATCH_DOMAIN, dom, dn, &val, res)
            == ROUTER_OK ? 1 : ROUTER_EINVAL;
    if (mrc != MDB_NOTFOUND)
        goto fail;
    if (dom[0] == '[')
        return 0;                   /* address literals have no parents */
    for (p = dom + 1; p < dom + dn; p++) {
        if (*p != '.')
            continue;
        mrc = router_get(r, p, (size_t)(dom + dn - p), &val);
        if (mrc == 0)
            return router_found(r, ROUTER_MATCH_WILDCARD, p,
                (size_t)(dom + dn - p), &val, res) == ROUTER_OK ? 1 :
                ROUTER_EINVAL;
        if (mrc != MDB_NOTFOUND)
            goto fail;
    }
    return 0;
fail:
    return router_fail(r, ROUTER_EDB, "mdb_get: %s", mdb_strerror(mrc));
}


int
router_lookup(struct router *r, const char *address,
    struct router_result *res)
{
    char    buf[ROUTER_ADDR_MAX];
    const char *at;
    size_t  n;
    int     rc;

    if (address == NULL)
        address = "";
    n = strlen(address);
    if (n >= 2 && address[0] == '<' && address[n - 1] == '>') {
        address++;                  /* "<a@b>" as given in MAIL/RCPT */
        n -= 2;
    }
    rc = 0;
    if (n > 0) {
        if ((rc = router_rbegin(r)) != ROUTER_OK)
            return rc;
        if (n < sizeof(buf)) {
            router_lower(buf, address, n);
            rc = router_search(r, buf, n, 1, res);
        } else if ((at = memrchr(address, '@', n)) != NULL &&
            (size_t)(address + n - at) < sizeof(buf)) {
            /* Too long for any address key; its domain may still match. */
            n = (size_t)(address + n - at);
            router_lower(buf, at, n);
            rc = router_search(r, buf, n, 0, res);
        }
        mdb_txn_reset(r->rtxn);     /* release the snapshot at once */
        if (rc < 0)
            return rc;
        if (rc == 1)
            return ROUTER_OK;
    }
    if (!r->has_default)
        return router_fail(r, ROUTER_ENOTFOUND, "no route for '%.*s' and no "
            "default", (int)(n > 200 ? 200 : n), address);
    res->match = ROUTER_MATCH_DEFAULT;
    memcpy(res->key, "default", sizeof("default"));
    memcpy(res->value, r->default_value, strlen(r->default_value) + 1);
    res->route = r->default_route;
    return ROUTER_OK;
}


/* router_wbegin - the batch txn if one is open, else a new write txn. */
static int
router_wbegin(struct router *r, MDB_txn **txn)
{
    int mrc;

    if (r->env == NULL)
        return router_fail(r, ROUTER_EDB, "%s", router_closed_err);
    if (r->wtxn != NULL) {
        *txn = r->wtxn;
        return ROUTER_OK;
    }
    if ((mrc = mdb_txn_begin(r->env, NULL, 0, txn)) != 0)
        return router_fail(r, router_mdb_rc(mrc), "write transaction: %s",
            mdb_strerror(mrc));
    return ROUTER_OK;
}


/* router_wend - commit (or abort on rc < 0) unless inside a batch. */
static int
router_wend(struct router *r, MDB_txn *txn, int rc)
{
    int mrc;

    if (txn == r->wtxn)
        return rc;
    if (rc < 0) {
        mdb_txn_abort(txn);
        return rc;
    }
    if ((mrc = mdb_txn_commit(txn)) != 0)
        return router_fail(r, router_mdb_rc(mrc), "commit: %s",
            mdb_strerror(mrc));
    return rc;
}


/* router_check_kv - validate and normalise a key/value pair into kbuf. */
static int
router_check_kv(struct router *r, const char *key, const char *value,
    char *kbuf, size_t kbufsz)
{
    char why[256];

    if (route_key_check(key, why, sizeof(why)) == -1)
        return router_fail(r, ROUTER_EINVAL, "bad key: %s", why);
    if (value != NULL) {
        struct route rt;

        if (route_parse(value, &rt, why, sizeof(why)) == -1)
            return router_fail(r, ROUTER_EINVAL, "bad route for '%s': %s",
                key, why);
    }
    snprintf(kbuf, kbufsz, "%s", key);      /* fits: key was checked */
    route_key_normalize(kbuf);
    return ROUTER_OK;
}


/* router_put_in / router_del_in - one write to table dbi (the routes or
 * the TLS policies), in the open batch or a transaction of its own; k is
 * checked and normalised.  A missing key is ROUTER_ENOTFOUND with what
 * ("no such key", "no TLS policy for") and, outside a batch, changes
 * nothing and does not fail the batch either. */
int
router_put_in(struct router *r, MDB_dbi dbi, const char *k, const char *value)
{
    MDB_txn *txn;
    MDB_val  mk, mv;
    int      rc, mrc;

    if ((rc = router_wbegin(r, &txn)) != ROUTER_OK)
        return rc;
    mk.mv_data = (void *)k;
    mk.mv_size = strlen(k);
    mv.mv_data = (void *)value;
    mv.mv_size = strlen(value);
    if ((mrc = mdb_put(txn, dbi, &mk, &mv, 0)) != 0)
        rc = router_fail(r, router_mdb_rc(mrc), "put '%s': %s", k,
            mdb_strerror(mrc));
    return router_wend(r, txn, rc);
}


int
router_del_in(struct router *r, MDB_dbi dbi, const char *k, const char *what)
{
    MDB_txn *txn;
    MDB_val  mk;
    int      rc, mrc;

    if ((rc = router_wbegin(r, &txn)) != ROUTER_OK)
        return rc;
    mk.mv_data = (void *)k;
    mk.mv_size = strlen(k);
    mrc = mdb_del(txn, dbi, &mk, NULL);
    if (mrc == MDB_NOTFOUND)
        rc = router_fail(r, ROUTER_ENOTFOUND, "%s '%s'", what, k);
    else if (mrc != 0)
        rc = router_fail(r, router_mdb_rc(mrc), "del '%s': %s", k,
            mdb_strerror(mrc));
    if (rc == ROUTER_ENOTFOUND && txn != r->wtxn) {
        mdb_txn_abort(txn);         /* nothing changed; not a failure of */
        return rc;                  /* the batch either */
    }
    return router_wend(r, txn, rc);
}


int
router_put(struct router *r, const char *key, const char *value)
{
    char k[ROUTE_KEY_MAX + 1];
    int  rc;

    if ((rc = router_check_kv(r, key, value, k, sizeof(k))) != ROUTER_OK)
        return rc;
    return router_put_in(r, r->dbi, k, value);
}


int
router_del(struct router *r, const char *key)
{
    char k[ROUTE_KEY_MAX + 1];
    int  rc;

    if ((rc = router_check_kv(r, key, NULL, k, sizeof(k))) != ROUTER_OK)
        return rc;
    return router_del_in(r, r->dbi, k, "no such key");
}


/* router_each_in - fn(key, value) for every entry of table dbi, in key
 * order, until fn returns non-zero.  The routes table also holds the TLS
 * policy table's own record (LMDB names a sub-database by a key of the
 * main one): skipped.  vmax: the longest value the table allows. */
int
router_each_in(struct router *r, MDB_dbi dbi, size_t vmax,
    int (*fn)(const char *key, const char *value, void *arg), void *arg)
{
    char        k[ROUTE_KEY_MAX + 1], v[ROUTE_VALUE_MAX + 1];
    MDB_cursor *cur;
    MDB_val     mk, mv;
    int         rc, mrc;

    if ((rc = router_rbegin(r)) != ROUTER_OK)
        return rc;
    if ((mrc = mdb_cursor_open(r->rtxn, dbi, &cur)) != 0) {
        mdb_txn_reset(r->rtxn);
        return router_fail(r, router_mdb_rc(mrc), "mdb_cursor_open: %s",
            mdb_strerror(mrc));
    }
    rc = ROUTER_OK;
    for (mrc = mdb_cursor_get(cur, &mk, &mv, MDB_FIRST); mrc == 0;
        mrc = mdb_cursor_get(cur, &mk, &mv, MDB_NEXT)) {
        if (dbi == r->dbi && router_is_side(&mk))
            continue;               /* a side table's record */
        if (mk.mv_size >= sizeof(k) || mv.mv_size > vmax) {
            rc = router_fail(r, ROUTER_EINVAL, "oversized %s entry (key "
                "%.40s...)", dbi == r->dbi ? "route" : dbi == r->tls_dbi ?
                "TLS policy" : "pool",
                (const char *)mk.mv_data);
            break;
        }
        memcpy(k, mk.mv_data, mk.mv_size);
        k[mk.mv_size] = '\0';
        memcpy(v, mv.mv_data, mv.mv_size);
        v[mv.mv_size] = '\0';
        if (fn(k, v, arg) != 0)
            break;
    }
    if (rc == ROUTER_OK && mrc != 0 && mrc != MDB_NOTFOUND)
        rc = router_fail(r, router_mdb_rc(mrc), "mdb_cursor_get: %s",
            mdb_strerror(mrc));
    mdb_cursor_close(cur);
    mdb_txn_reset(r->rtxn);
    return rc;
}


int
router_each(struct router *r,
    int (*fn)(const char *key, const char *value, void *arg), void *arg)
{
    return router_each_in(r, r->dbi, ROUTE_VALUE_MAX, fn, arg);
}


void
router_reader_check(struct router *r)
{
    int dead;

    if (r != NULL && r->env != NULL)
        mdb_reader_check(r->env, &dead);
}


int
router_begin(struct router *r)
{
    MDB_txn *txn;
    int      rc;

    if (r->wtxn != NULL)
        return router_fail(r, ROUTER_EINVAL, "a batch is already open");
    if ((rc = router_wbegin(r, &txn)) != ROUTER_OK)
        return rc;
    r->wtxn = txn;
    return ROUTER_OK;
}


int
router_commit(struct router *r)
{
    MDB_txn *txn = r->wtxn;
    int      mrc;

    if (txn == NULL)
        return router_fail(r, ROUTER_EINVAL, "no batch open");
    r->wtxn = NULL;
    if ((mrc = mdb_txn_commit(txn)) != 0)
        return router_fail(r, router_mdb_rc(mrc), "commit: %s",
            mdb_strerror(mrc));
    return ROUTER_OK;
}


void
router_abort(struct router *r)
{
    if (r != NULL && r->wtxn != NULL) {
        mdb_txn_abort(r->wtxn);
        r->wtxn = NULL;
    }
}


int
router_clear(struct router *r)
{
    MDB_txn *txn;
    int      rc, mrc;

    if ((rc = router_wbegin(r, &txn)) != ROUTER_OK)
        return rc;
    if (!r->have_tls && !r->have_pool) {
        if ((mrc = mdb_drop(txn, r->dbi, 0)) != 0)
            rc = router_fail(r, router_mdb_rc(mrc), "mdb_drop: %s",
                mdb_strerror(mrc));
        return router_wend(r, txn, rc);
    }
    /* The main database also holds the TLS table's record: mdb_drop()
     * would lose that table, so the routes go one by one. */
    {
        MDB_cursor *cur;
        MDB_val     mk, mv;

        if ((mrc = mdb_cursor_open(txn, r->dbi, &cur)) != 0)
            return router_wend(r, txn, router_fail(r, router_mdb_rc(mrc),
                "mdb_cursor_open: %s", mdb_strerror(mrc)));
        for (mrc = mdb_cursor_get(cur, &mk, &mv, MDB_FIRST); mrc == 0;
            mrc = mdb_cursor_get(cur, &mk, &mv, MDB_NEXT)) {
            if (router_is_side(&mk))
                continue;
            /* MDB_NEXT after a delete yields the entry that followed */
            if ((mrc = mdb_cursor_del(cur, 0)) != 0)
                break;
        }
        mdb_cursor_close(cur);
        if (mrc != 0 && mrc != MDB_NOTFOUND)
            rc = router_fail(r, router_mdb_rc(mrc), "clear: %s",
                mdb_strerror(mrc));
    }
    return router_wend(r, txn, rc);
}


int
router_load_static(struct router *r, const struct router_static *routes,
    size_t n)
{
    char    why[256];
    size_t  i;
    int     rc, own;

    for (i = 0; i < n; i++) {       /* check all before writing any */
        struct route rt;

        if (route_key_check(routes[i].key, why, sizeof(why)) == -1 ||
            route_parse(routes[i].route, &rt, why, sizeof(why)) == -1)
            return router_fail(r, ROUTER_EINVAL, "routes.static line %d: %s",
                routes[i].line, why);
    }
    own = r->wtxn == NULL;
    if (own && (rc = router_begin(r)) != ROUTER_OK)
        return rc;
    for (i = 0; i < n; i++)
        if ((rc = router_put(r, routes[i].key, routes[i].route)) !=
            ROUTER_OK) {
            if (own)
                router_abort(r);
            return rc;
        }
    return own ? router_commit(r) : ROUTER_OK;
}


/* ---- the TLS policy table ---- */

static const char *const router_tls_words[] = { "none", "may", "encrypt",
    "verify", "dane", "dane-only" };
#define ROUTER_TLS_NLEVELS \
    ((int)(sizeof(router_tls_words) / sizeof(router_tls_words[0])))


int
router_tls_level(const char *word)
{
    int i;

    for (i = 0; word != NULL && i < ROUTER_TLS_NLEVELS; i++)
        if (strcmp(word, router_tls_words[i]) == 0)
            return i;
    return -1;
}


const char *
router_tls_level_name(int level)
{
    return level >= 0 && level < ROUTER_TLS_NLEVELS ?
        router_tls_words[level] : "?";
}


int
router_tls_get(struct router *r, const char *key, char *val, size_t valsz)
{
    MDB_val mk, mv;
    size_t  n = key != NULL ? strlen(key) : 0;
    int     rc, mrc;

    if (!r->have_tls || n == 0 || n > ROUTE_KEY_MAX)
        return router_fail(r, ROUTER_ENOTFOUND, "no TLS policy for '%.60s'",
            key != NULL ? key : "");
    if ((rc = router_rbegin(r)) != ROUTER_OK)
        return rc;
    mk.mv_data = (void *)key;
    mk.mv_size = n;
    mrc = mdb_get(r->rtxn, r->tls_dbi, &mk, &mv);
    if (mrc == 0) {
        if (mv.mv_size >= valsz || mv.mv_size > ROUTER_TLS_VALUE_MAX)
            rc = router_fail(r, ROUTER_EINVAL, "stored TLS policy for '%s' "
                "is too long", key);
        else {
            memcpy(val, mv.mv_data, mv.mv_size);
            val[mv.mv_size] = '\0';
            if (router_tls_level(val) < 0)
                rc = router_fail(r, ROUTER_EINVAL, "stored TLS policy for "
                    "'%s' is not a level", key);
        }
    } else if (mrc == MDB_NOTFOUND) {
        rc = router_fail(r, ROUTER_ENOTFOUND, "no TLS policy for '%s'", key);
    } else {
        rc = router_fail(r, ROUTER_EDB, "mdb_get: %s", mdb_strerror(mrc));
    }
    mdb_txn_reset(r->rtxn);
    return rc;
}


/* router_tls_key - check and normalise a key for the TLS table. */
static int
router_tls_key(struct router *r, const char *key, char *kbuf, size_t kbufsz)
{
    char why[256];

    if (!r->have_tls)
        return router_fail(r, ROUTER_EDB, "the TLS policy table does not "
            "exist (opened read-only)");
    if (route_key_check(key, why, sizeof(why)) == -1)
        return router_fail(r, ROUTER_EINVAL, "bad key: %s", why);
    snprintf(kbuf, kbufsz, "%s", key);
    route_key_normalize(kbuf);
    return ROUTER_OK;
}


int
router_tls_put(struct router *r, const char *key, const char *level)
{
    char k[ROUTE_KEY_MAX + 1];
    int  rc;

    if ((rc = router_tls_key(r, key, k, sizeof(k))) != ROUTER_OK)
        return rc;
    if (router_tls_level(level) < 0)
        return router_fail(r, ROUTER_EINVAL, "bad TLS level '%.40s' (none, "
            "may, encrypt, verify, dane or dane-only)", level);
    return router_put_in(r, r->tls_dbi, k, level);
}


int
router_tls_del(struct router *r, const char *key)
{
    char k[ROUTE_KEY_MAX + 1];
    int  rc;

    if ((rc = router_tls_key(r, key, k, sizeof(k))) != ROUTER_OK)
        return rc;
    return router_del_in(r, r->tls_dbi, k, "no TLS policy for");
}


int
router_tls_each(struct router *r,
    int (*fn)(const char *key, const char *value, void *arg), void *arg)
{
    if (!r->have_tls)
        return ROUTER_OK;
    return router_each_in(r, r->tls_dbi, ROUTER_TLS_VALUE_MAX, fn, arg);
}
