/*
 * grey.h - greylisting: the triplet (client network, sender, recipient),
 * the decision, and its state in an LMDB file (greylist.mdb).
 *
 * CONTRACT  grey_key() and grey_decide() are pure (no I/O).  A struct
 *           grey is one process's LMDB environment on the file, opened
 *           with MDB_NOSUBDIR | MDB_NOTLS (one loop thread uses it, read
 *           transactions are not tied to a thread) | MDB_NOSYNC (a
 *           record lost to a machine crash costs one more deferral, not
 *           mail; a killed process loses nothing: the pages are written).
 *           LMDB's own lock file serialises writers across the workers
 *           and the master.  Open it after fork (never share one across
 *           fork) and before the sandbox: no path is opened later.
 *           Times are wall-clock milliseconds (the state outlives the
 *           process, so CLOCK_MONOTONIC would not do).
 * FAILURE   Never logs.  0 or -1 with the reason in grey_errstr().
 */
#ifndef MTAD_GREY_H
#define MTAD_GREY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define GREY_KEY_MAX   500          /* LMDB keys stop at 511 bytes */
#define GREY_FILE      "greylist.mdb"

/* One triplet's record. */
struct grey_rec {
    uint64_t first_ms;              /* first seen (the delay runs from it) */
    uint64_t pass_ms;               /* last passing message; 0: not yet */
    uint64_t last_ms;               /* last deferral or pass written */
    uint64_t deferred;              /* attempts deferred */
};

struct grey_params {
    uint64_t delay_ms;              /* deferred until this long after first */
    uint64_t expiry_ms;             /* an unconfirmed triplet is forgotten */
    uint64_t pass_lifetime_ms;      /* a passed one, after its last pass */
};

/* The verdict of grey_decide(). */
enum grey_verdict { GREY_DEFER = 0, GREY_PASS = 1 };
#define GREY_LAZY_MS  (3600 * 1000)  /* a passed triplet is rewritten at
                                        most once an hour */

/* grey_key - the triplet's key into out (at least GREY_KEY_MAX + 1):
 * "<net> <sender> <recipient>", the network IPv4 /v4_prefix or IPv6
 * /v6_prefix written as "192.0.2.0/24" (the bare address at /32 or
 * /128), sender "<>" when null, addresses lower-cased, control bytes and
 * spaces as '?'.  A longer key keeps its first bytes and ends in "#" and
 * 16 hex digits of a hash of the whole.  Its length, or 0 when sa is not
 * IPv4 or IPv6. */
size_t  grey_key(const struct sockaddr *sa, unsigned v4_prefix,
            unsigned v6_prefix, const char *sender, const char *rcpt,
            char *out);

/* grey_net - sa's network as the key writes it; its length, 0 when sa is
 * not IP (or outsz is too small). */
size_t  grey_net(const struct sockaddr *sa, unsigned v4_prefix,
            unsigned v6_prefix, char *out, size_t outsz);

/* grey_expired - rec is past its expiry or pass lifetime at now_ms. */
int     grey_expired(const struct grey_rec *rec, uint64_t now_ms,
            const struct grey_params *p);

/* grey_decide - the verdict for an attempt at now_ms; rec: the stored
 * record or NULL (none).  *out is the record to store and *write says
 * whether it must be (a new or expired triplet, the first pass, a passed
 * triplet whose pass is GREY_LAZY_MS old; a deferral within the delay
 * writes nothing). */
enum grey_verdict grey_decide(const struct grey_rec *rec, uint64_t now_ms,
            const struct grey_params *p, struct grey_rec *out, int *write);

/* grey_domain_match - domain (no '@'; case ignored) is one of list[n] or
 * below one ("example.org" matches "mx.example.org" too). */
int     grey_domain_match(const char *domain, char *const *list, size_t n);

struct grey;
/* grey_open - path's environment (created, mode 0600, when missing). */
int     grey_open(struct grey **gp, const char *path);
void    grey_close(struct grey *g);                 /* NULL ok */
const char *grey_errstr(const struct grey *g);

/* grey_check - the verdict for key at now_ms (grey_decide() on the stored
 * record, the record written when it says so).  -1 on an LMDB failure
 * (the caller lets the message pass: greylisting fails open). */
int     grey_check(struct grey *g, const char *key, size_t klen,
            uint64_t now_ms, const struct grey_params *p,
            enum grey_verdict *v);

/* grey_each - every record whose key starts with prefix ("" all; a
 * prefix matches whole words: "192.0.2.0/24" matches its triplets, not
 * "192.0.2.0/240"), in key order; fn returns nonzero to stop.  grey_del -
 * remove those records (prefix "" : all, the flush); grey_prune - remove
 * the expired ones.  The number seen or removed, or -1. */
typedef int (*grey_each_fn)(const char *key, size_t klen,
            const struct grey_rec *rec, void *arg);
long    grey_each(struct grey *g, const char *prefix, grey_each_fn fn,
            void *arg);
long    grey_del(struct grey *g, const char *prefix);
long    grey_prune(struct grey *g, uint64_t now_ms,
            const struct grey_params *p);

#endif /* MTAD_GREY_H */
