/*
 * grey_db.c - greylist.mdb: the triplets' records in one LMDB file
 * (grey.h).
 *
 * PURPOSE   Every worker checks and writes the triplets of its sessions;
 *           the master prunes the expired ones on a timer and answers
 *           mtactl greylist.  LMDB's lock file makes them one table.
 * CONTRACT  One environment per process, the unnamed database, 256 MiB
 *           of map (sparse; about a million triplets).  A check is one
 *           read transaction, reset and renewed (no allocation), and a
 *           write transaction only when grey_decide() says so: a known
 *           passed triplet costs a write at most once an hour.
 * FAILURE   -1 and grey_errstr(); a full map fails the writes, which the
 *           caller turns into a pass (fail open), until the master's
 *           prune frees room.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lmdb.h>

#include "grey/grey.h"

#define GREY_MAPSIZE     ((size_t)256 << 20)
#define GREY_MAXREADERS  512
#define GREY_MODE        0600

struct grey {
    MDB_env *env;
    MDB_dbi  dbi;
    MDB_txn *rtxn;                  /* reset between checks */
    char     err[256];
};

static int grey_fail(struct grey *g, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int
grey_fail(struct grey *g, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(g->err, sizeof(g->err), fmt, ap);
    va_end(ap);
    return -1;
}


int
grey_open(struct grey **gp, const char *path)
{
    struct grey *g = calloc(1, sizeof(*g));
    MDB_txn     *txn;
    int          rc, dead;

    *gp = g;
    if (g == NULL)
        return -1;
    if ((rc = mdb_env_create(&g->env)) != 0)
        return grey_fail(g, "mdb_env_create: %s", mdb_strerror(rc));
    if ((rc = mdb_env_set_mapsize(g->env, GREY_MAPSIZE)) != 0 ||
        (rc = mdb_env_set_maxreaders(g->env, GREY_MAXREADERS)) != 0 ||
        (rc = mdb_env_open(g->env, path, MDB_NOSUBDIR | MDB_NOTLS |
        MDB_NOSYNC | MDB_NOMETASYNC, GREY_MODE)) != 0)
        goto fail;
    if ((rc = mdb_txn_begin(g->env, NULL, 0, &txn)) != 0)
        goto fail;
    if ((rc = mdb_dbi_open(txn, NULL, 0, &g->dbi)) != 0) {
        mdb_txn_abort(txn);
        goto fail;
    }
    if ((rc = mdb_txn_commit(txn)) != 0)
        goto fail;
    (void)mdb_reader_check(g->env, &dead);  /* slots of killed processes */
    return 0;
fail:
    grey_fail(g, "%s: %s", path, mdb_strerror(rc));
    mdb_env_close(g->env);
    g->env = NULL;
    return -1;
}


void
grey_close(struct grey *g)
{
    if (g == NULL)
        return;
    if (g->rtxn != NULL)
        mdb_txn_abort(g->rtxn);
    if (g->env != NULL)
        mdb_env_close(g->env);
    free(g);
}


const char *
grey_errstr(const struct grey *g)
{
    return g == NULL ? "out of memory" : g->err;
}


/* grey_get - key's record into *rec: 1 found, 0 none, -1 failed. */
static int
grey_get(struct grey *g, const char *key, size_t klen, struct grey_rec *rec)
{
    MDB_val k = { klen, (void *)key }, v;
    int     rc;

    if (g->rtxn == NULL)
        rc = mdb_txn_begin(g->env, NULL, MDB_RDONLY, &g->rtxn);
    else
        rc = mdb_txn_renew(g->rtxn);
    if (rc != 0) {
        if (g->rtxn != NULL)
            mdb_txn_abort(g->rtxn);     /* a failed renew: begin anew */
        g->rtxn = NULL;
        return grey_fail(g, "read: %s", mdb_strerror(rc));
    }
    rc = mdb_get(g->rtxn, g->dbi, &k, &v);
    if (rc == 0 && v.mv_size == sizeof(*rec))
        memcpy(rec, v.mv_data, sizeof(*rec));
    mdb_txn_reset(g->rtxn);
    if (rc == MDB_NOTFOUND || (rc == 0 && v.mv_size != sizeof(*rec)))
        return 0;                   /* a foreign value: start over */
    if (rc != 0)
        return grey_fail(g, "get: %s", mdb_strerror(rc));
    return 1;
}


static int
grey_put(struct grey *g, const char *key, size_t klen,
    const struct grey_rec *rec)
{
    MDB_val  k = { klen, (void *)key }, v = { sizeof(*rec), (void *)rec };
    MDB_txn *txn;
    int      rc;

    if ((rc = mdb_txn_begin(g->env, NULL, 0, &txn)) != 0)
        return grey_fail(g, "write: %s", mdb_strerror(rc));
    if ((rc = mdb_put(txn, g->dbi, &k, &v, 0)) != 0) {
        mdb_txn_abort(txn);
        return grey_fail(g, "put: %s", mdb_strerror(rc));
    }
    if ((rc = mdb_txn_commit(txn)) != 0)
        return grey_fail(g, "commit: %s", mdb_strerror(rc));
    return 0;
}


int
grey_check(struct grey *g, const char *key, size_t klen, uint64_t now_ms,
    const struct grey_params *p, enum grey_verdict *v)
{
    struct grey_rec rec, neu;
    int             found, write;

    if (klen == 0 || klen > GREY_KEY_MAX)
        return grey_fail(g, "bad key");
    if ((found = grey_get(g, key, klen, &rec)) < 0)
        return -1;
    *v = grey_decide(found ? &rec : NULL, now_ms, p, &neu, &write);
    if (!write && *v == GREY_DEFER && found) {
        /* a deferral within the delay: counted only when another write
         * happens anyway (no write per retry) */
        return 0;
    }
    if (write && found && *v == GREY_DEFER && neu.first_ms == rec.first_ms)
        neu.deferred = rec.deferred + 1;
    return write ? grey_put(g, key, klen, &neu) : 0;
}


/* grey_prefix_ok - key starts with prefix at a word's end. */
static int
grey_prefix_ok(const MDB_val *k, const char *prefix, size_t pl)
{
    const char *s = k->mv_data;

    return pl == 0 || (k->mv_size >= pl && memcmp(s, prefix, pl) == 0 &&
        (k->mv_size == pl || s[pl] == ' '));
}


/* grey_walk - the records from prefix on; fn(g, cursor, ...) per match,
 * in one transaction (write: may delete at the cursor). */
enum grey_op { GREY_OP_EACH, GREY_OP_DEL, GREY_OP_PRUNE };

static long
grey_walk(struct grey *g, const char *prefix, enum grey_op op,
    uint64_t now_ms, const struct grey_params *p, grey_each_fn fn,
    void *arg)
{
    MDB_txn        *txn;
    MDB_cursor     *cur;
    MDB_val         k, v;
    struct grey_rec rec;
    size_t          pl = strlen(prefix);
    long            n = 0;
    int             rc;

    if ((rc = mdb_txn_begin(g->env, NULL, op == GREY_OP_EACH ? MDB_RDONLY :
        0, &txn)) != 0)
        return grey_fail(g, "txn: %s", mdb_strerror(rc));
    if ((rc = mdb_cursor_open(txn, g->dbi, &cur)) != 0) {
        mdb_txn_abort(txn);
        return grey_fail(g, "cursor: %s", mdb_strerror(rc));
    }
    k.mv_size = pl;
    k.mv_data = (void *)prefix;
    rc = pl ? mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE) :
        mdb_cursor_get(cur, &k, &v, MDB_FIRST);
    for (; rc == 0; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (pl && (k.mv_size < pl || memcmp(k.mv_data, prefix, pl) != 0))
            break;                  /* past the prefix's range */
        if (!grey_prefix_ok(&k, prefix, pl))
            continue;
        memset(&rec, 0, sizeof(rec));
        if (v.mv_size == sizeof(rec))
            memcpy(&rec, v.mv_data, sizeof(rec));
        if (op == GREY_OP_EACH) {
            n++;
            if (fn(k.mv_data, k.mv_size, &rec, arg) != 0)
                break;
            continue;
        }
        if (op == GREY_OP_PRUNE && v.mv_size == sizeof(rec) &&
            !grey_expired(&rec, now_ms, p))
            continue;
        if ((rc = mdb_cursor_del(cur, 0)) != 0)
            break;
        n++;
    }
    mdb_cursor_close(cur);
    if (rc != 0 && rc != MDB_NOTFOUND && op != GREY_OP_EACH) {
        mdb_txn_abort(txn);
        return grey_fail(g, "walk: %s", mdb_strerror(rc));
    }
    if (op == GREY_OP_EACH)
        mdb_txn_abort(txn);
    else if ((rc = mdb_txn_commit(txn)) != 0)
        return grey_fail(g, "commit: %s", mdb_strerror(rc));
    return n;
}


long
grey_each(struct grey *g, const char *prefix, grey_each_fn fn, void *arg)
{
    return grey_walk(g, prefix, GREY_OP_EACH, 0, NULL, fn, arg);
}


long
grey_del(struct grey *g, const char *prefix)
{
    return grey_walk(g, prefix, GREY_OP_DEL, 0, NULL, NULL, NULL);
}


long
grey_prune(struct grey *g, uint64_t now_ms, const struct grey_params *p)
{
    return grey_walk(g, "", GREY_OP_PRUNE, now_ms, p, NULL, NULL);
}
