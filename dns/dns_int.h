/*
 * dns_int.h - declarations shared by dns.c (the c-ares channel, the public
 * calls), cache.c (the rrset cache and the CNAME chase) and request.c (MX,
 * host and raw requests).  Nothing outside dns/ includes this.
 */
#ifndef MTAD_DNS_INT_H
#define MTAD_DNS_INT_H

#include <ares.h>
#include <stddef.h>
#include <stdint.h>

#include "common/ev.h"
#include "dns/dns.h"

#define DNS_MAX_HOPS   8            /* CNAMEs followed per lookup */
#define DNS_MAX_MX     32           /* MX hosts considered */
#define DNS_MAX_ADDR   64           /* addresses kept per host */

struct dns_chase;

struct dns_waiter {
    struct dns_waiter  *next;
    struct dns_chase   *c;
};

struct dns_entry {
    struct dns_entry   *hnext;      /* hash chain */
    struct dns_entry   *prev, *next; /* LRU list, oldest first (done only) */
    struct dns         *d;
    char                name[DNS_NAME_MAX];
    uint16_t            type;
    int                 pending, busy, linked;
    enum dns_status     status;
    char                why[160];
    uint64_t            expires;    /* ms on d's clock */
    struct dns_msg      msg;
    struct dns_waiter  *waiters, **wtail;
};

enum dns_kind { DNS_REQ_MX, DNS_REQ_HOST, DNS_REQ_QUERY };

/* What a chase found: status, the final name and its entry (valid only
 * during the done callback). */
typedef void dns_chase_fn(struct dns_chase *c, enum dns_status st,
    const struct dns_entry *e, const char *why);

struct dns_chase {
    struct dns_chase   *next;       /* in its request */
    struct dns_req     *req;
    char                name[DNS_NAME_MAX]; /* current, after CNAMEs */
    uint16_t            type;
    int                 hops, secure;
    uint32_t            ttl;        /* min seconds left over the chain */
    size_t              slot;       /* host index */
    dns_chase_fn       *done;
};

struct dns_hostwork {
    struct dns_addr     v4[DNS_MAX_ADDR], v6[DNS_MAX_ADDR];
    size_t              n4, n6;
    int                 temp, nx, secure, answered;
    uint32_t            ttl;
    char                why[160];
    char                target[DNS_NAME_MAX]; /* after CNAMEs */
};

struct dns_req {
    struct dns_req     *prev, *next; /* d->reqs */
    struct dns         *d;
    enum dns_kind       kind;
    int                 cancelled, finished;
    unsigned            outstanding;
    struct ev_timer     timer;      /* delivers the result */
    dns_dest_fn        *dfn;
    dns_rrset_fn       *rfn;
    void               *arg;
    struct dns_chase   *chases;
    struct dns_dest    *dest;
    struct dns_rrset   *set;
    struct dns_hostwork *work;      /* one per dest->host */
};

struct dns {
    struct ev_loop     *loop;
    ares_channel        ch;
    struct dns_options  o;
    struct ev_timer     timer;      /* c-ares timeouts */
    struct dns_entry  **tab;
    size_t              tabmask, count;
    struct dns_entry   *lru_head, *lru_tail;
    struct dns_req     *reqs;
    uint64_t          (*now_fn)(void *);
    void               *now_arg;
    int                 closing;
    struct dns_stats    st;
};

/* dns.c */
void dns_rearm(struct dns *d);
uint64_t dns_now(const struct dns *d);
uint32_t dns_left(const struct dns *d, const struct dns_entry *e);

/* cache.c */
void dns_entry_free(struct dns_entry *e);
void dns_chase_start(struct dns_chase *c);

/* request.c */
void dns_req_free(struct dns_req *r);
struct dns_req *dns_req_new(struct dns *d, enum dns_kind kind, void *arg);
void dns_req_chase(struct dns_req *r, const char *name, uint16_t type,
    size_t slot, dns_chase_fn *fn);
void dns_req_check(struct dns_req *r);
void dns_req_hosts(struct dns_req *r);
void dns_mx_done(struct dns_chase *c, enum dns_status st,
    const struct dns_entry *e, const char *why);
void dns_query_done(struct dns_chase *c, enum dns_status st,
    const struct dns_entry *e, const char *why);

#endif
