/*
 * router.h - next-hop lookup in an LMDB table.
 *
 * CONTRACT  One struct router per process, opened after fork (LMDB handles
 *           must not cross a fork).  router_lookup() uses one read-only
 *           transaction that is reset after each lookup and renewed before
 *           the next: no lock, no allocation on the hot path.
 *           Lookup order for "local@domain": the address, the domain, then
 *           ".parent" wildcards from the nearest up (".sub.example.org",
 *           ".example.org", ".org"), then routes.default.
 *           The writer side (router_put/del/load_static) runs a write
 *           transaction; values are checked with route_parse() first.
 * TRUST     Two files, two kinds of user.  The live table (routes.db and
 *           its "-lock", mode 0600) is opened only by root's processes:
 *           the master (routes.static at start and reload) and mtactl.
 *           LMDB's lock file holds process-shared mutexes that anyone
 *           mapping it can take with a plain store, no system call, and
 *           then every other user of the file waits forever in
 *           futex_wait; so no worker may map it.  Workers read a
 *           snapshot instead: router_snapshot() (a compacting copy of
 *           one read transaction) written by the master to a new file
 *           in ROUTER_SNAP_DIR, renamed over ROUTER_SNAP_FILE, never
 *           written again, and opened with ROUTER_OPEN_SNAPSHOT
 *           (MDB_RDONLY | MDB_NOLOCK: no lock file, the data mapped
 *           read-only).  No file of the table is a worker's to write,
 *           so no worker can stall the master, mtactl or another
 *           worker's lookups through it.  After each
 *           change mtactl asks the master ("routes" on the control
 *           socket) to publish a new snapshot; the master tells every
 *           worker ("routes" on its channel) before it answers, and the
 *           worker router_reopen()s between two lookups.
 * FAILURE   Never logs.  0 or ROUTER_E*; router_errstr() tells why.
 */
#ifndef MTAD_ROUTER_H
#define MTAD_ROUTER_H

#include <stddef.h>

#include "router/route.h"

enum router_rc {
    ROUTER_OK = 0, ROUTER_ESYS = -1, ROUTER_ENOTFOUND = -3,
    ROUTER_EINVAL = -4, ROUTER_EDB = -5
};

enum router_match {
    ROUTER_MATCH_ADDRESS = 1, ROUTER_MATCH_DOMAIN, ROUTER_MATCH_WILDCARD,
    ROUTER_MATCH_DEFAULT
};

struct router_result {
    enum router_match match;
    char         key[ROUTE_KEY_MAX + 1];     /* matched key, or "default" */
    char         value[ROUTE_VALUE_MAX + 1]; /* route text as stored */
    struct route route;             /* parsed */
};

struct router;

/* One route written in relay.yaml's routes.static (config/ fills these). */
struct router_static {
    int   line, col;                /* where it was written, for errors */
    char *key;                      /* lower-case: "example.org", ".x.org", "a@b" */
    char *route;                    /* "smtp:[h]:25", "maildir:/p", "discard", ... */
};

/* Opens (creating if missing, when create has ROUTER_OPEN_CREATE) the
 * environment at path: one file (MDB_NOSUBDIR) plus "<path>-lock".  With
 * ROUTER_OPEN_RDONLY the data file is opened and mapped read-only
 * (MDB_RDONLY): writes fail with ROUTER_ESYS (EACCES).
 * A symlink or a hard-linked file at path or its -lock is refused
 * (ROUTER_ESYS, errno ELOOP).  default_route is used when no key matches
 * (NULL: no default, such lookups return ROUTER_ENOTFOUND).
 * On failure *rp still holds a router whose router_errstr() says why;
 * router_close() it (router_errstr(NULL) is safe too). */
#define ROUTER_OPEN_CREATE  1
#define ROUTER_OPEN_RDONLY  2
#define ROUTER_OPEN_SNAPSHOT 4      /* a snapshot: read-only, no lock file */
int     router_open(struct router **rp, const char *path,
            const char *default_route, int create);
void    router_close(struct router *r);          /* NULL ok */
/* Opens path with flags (as router_open) and, when that works, makes r
 * use it instead of what it had (default route kept).  Only between
 * lookups: no view of the old table survives.  On failure r is
 * unchanged and router_errstr() says why. */
int     router_reopen(struct router *r, const char *path, int flags);

/* Snapshots (TRUST above): the directory "<db>" ROUTER_SNAP_DIR holds
 * ROUTER_SNAP_FILE, the table the workers read, and the master's
 * temporary files while it writes the next one. */
#define ROUTER_SNAP_DIR     ".snapshot"
#define ROUTER_SNAP_FILE    "routes.mdb"
/* Both paths for db; ROUTER_ESYS (ENAMETOOLONG) when one does not fit. */
int     router_snapshot_path(const char *db, char *dir, size_t dirsz,
            char *file, size_t filesz);
/* Writes a compact copy of the committed table (routes and TLS
 * policies) to fd, which the caller then fsyncs or renames. */
int     router_snapshot(struct router *r, int fd);
const char *router_errstr(const struct router *r);

/* address is "local@domain" (any case); "" or "<>" looks up the default. */
int     router_lookup(struct router *r, const char *address,
            struct router_result *res);

/* Writer side (master at start, mtactl).  Keys are normalised. */
int     router_put(struct router *r, const char *key, const char *value);
int     router_del(struct router *r, const char *key);   /* ENOTFOUND */
/* Calls fn for every key in order; stops when fn returns non-zero. */
int     router_each(struct router *r,
            int (*fn)(const char *key, const char *value, void *arg),
            void *arg);
/* Reclaim reader slots of dead processes (a killed mtactl). */
void    router_reader_check(struct router *r);

/* Batch writes: between router_begin() and router_commit() every
 * router_put/del/clear goes into one write transaction, so the batch is
 * seen whole or not at all (mtactl route import).  router_abort() drops
 * it.  Lookups during a batch see the last committed state. */
int     router_begin(struct router *r);
int     router_commit(struct router *r);
void    router_abort(struct router *r);                  /* no batch ok */
/* Deletes every key (in the batch, or in its own transaction). */
int     router_clear(struct router *r);
/* routes.static from relay.yaml: puts every entry in one transaction
 * (adds or replaces those keys; other keys are kept).  ROUTER_EINVAL names
 * the entry's line when one is malformed; then nothing is written. */
int     router_load_static(struct router *r,
            const struct router_static *routes, size_t n);

/*
 * The outbound TLS policy table: a second named database,
 * ROUTER_TLS_DB, in the same environment.  Keys as route keys ("domain",
 * ".domain", "user@domain"; route_key_check(), lower-cased), values one
 * level word of router_tls_level().  Read like routes (the same
 * reset/renewed read transaction, and in the same snapshot); written by
 * mtactl.  The database
 * is created by any writer's router_open(); a reader that opened the
 * file before it existed finds no entry (ROUTER_ENOTFOUND) until it
 * reopens (workers open after the master's open).  router_each() and
 * router_clear() leave it alone.
 */
#define ROUTER_TLS_DB      "TLS-POLICY"  /* upper case: never a route key */
#define ROUTER_TLS_VALUE_MAX 16
/* The level words, in enum tls_level order (tlspol/tlspol.h):
 * "none", "may", "encrypt", "verify", "dane", "dane-only".  Returns the
 * index, or -1 for any other word. */
int     router_tls_level(const char *word);
const char *router_tls_level_name(int level);   /* "?" when out of range */
/* val: at least ROUTER_TLS_VALUE_MAX + 1 bytes.  key as stored (exact,
 * lower case).  ROUTER_OK, ROUTER_ENOTFOUND or an error. */
int     router_tls_get(struct router *r, const char *key, char *val,
            size_t valsz);
int     router_tls_put(struct router *r, const char *key, const char *level);
int     router_tls_del(struct router *r, const char *key);   /* ENOTFOUND */
int     router_tls_each(struct router *r,
            int (*fn)(const char *key, const char *value, void *arg),
            void *arg);

/*
 * The sender pool table (router_pool.c): a third named database,
 * ROUTER_POOL_DB, in the same environment, kept like the TLS policy
 * table (read through the same transaction and snapshot, written by
 * mtactl pool, created by any writer's router_open()).  Keys: a sender
 * domain, or ".domain" for its subdomains (route_key_check(), no
 * "user@"); values: an egress pool name (route_pool_name_ok()).  Whether
 * the pool exists is the delivery's question (relay.yaml egress.pools):
 * the table may name one a later reload adds.
 */
#define ROUTER_POOL_DB      "SENDER-POOL"  /* upper case: never a key */
#define ROUTER_POOL_VALUE_MAX ROUTE_POOL_MAX
int     router_pool_get(struct router *r, const char *key, char *val,
            size_t valsz);          /* val: ROUTER_POOL_VALUE_MAX + 1 */
int     router_pool_put(struct router *r, const char *key, const char *pool);
int     router_pool_del(struct router *r, const char *key);  /* ENOTFOUND */
int     router_pool_each(struct router *r,
            int (*fn)(const char *key, const char *value, void *arg),
            void *arg);

#endif /* MTAD_ROUTER_H */
