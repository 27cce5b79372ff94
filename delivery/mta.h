/*
 * mta.h - the outbound SMTP client inside a worker's event loop: one
 * state machine per connection toward a next hop, connection reuse per
 * destination.  Internal to delivery/ (delivery.h is the module's
 * contract); the protocol text it speaks comes from smtp/.
 *
 * CONTRACT  deliver.c hands mta_submit() one transaction: a message (its
 *           envelope and the open queue file), a subset of its recipients
 *           that share one SMTP route, and a completion callback.  The relay
 *           fills one struct mta_result per recipient and calls done()
 *           exactly once, from the loop (never from inside mta_submit()).
 *           A "destination" is the key in txn->dest (the route text, or
 *           "mx:<domain>" for an mx route): transactions to the same
 *           destination share its concurrency cap.  The addresses to try
 *           come resolved in txn->hops (resolve.c; the relay never resolves
 *           a name); without hops, only the address literals of the route
 *           are used.  An idle connection is reused by any destination
 *           that has its address and port among its hops: domains that
 *           share MX hosts share their connections.
 *           The txn, env and fd belong to the caller and must stay valid
 *           until done() ran.
 * FAILURE   Never fails to the caller: every problem becomes a deferred or
 *           bounced result with a reason in SMTP form ("451 4.4.1 ...").
 */
#ifndef MTAD_MTA_H
#define MTAD_MTA_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "router/route.h"
#include "smtp/smtp.h"

struct ev_loop;
struct spool_env;


enum mta_status { MTA_DEFER = 0, MTA_SENT, MTA_BOUNCE };

/* "host[ip]:port" with its NUL: a 255-byte name, an IPv6 address, a port. */
#define MTA_RELAY_MAX 320

struct mta_result {
    int     status;                 /* enum mta_status */
    char    reply[SMTP_REPLY_MAX]; /* peer's reply or our reason */
    char    relay[MTA_RELAY_MAX];   /* "host[ip]:port", or "none" */
};

/* One address to try, from DNS or a literal route host. */
struct mta_hop {
    char        name[256];          /* MX or route host, for relay=... */
    unsigned    port;
    struct sockaddr_storage ss;     /* address and port */
    socklen_t   len;
};

struct mta_txn;
typedef void mta_done_fn(struct mta_txn *t);

struct mta_txn {
    /* set by the caller */
    const struct spool_env *env;
    int         fd;                 /* queue file (locked by the caller) */
    off_t       body_off;
    const char *dest;               /* route text: the destination key */
    const struct route *route;      /* parsed, ROUTE_SMTP or ROUTE_MX */
    const struct mta_hop *hops;     /* addresses in the order to try */
    size_t      nhops;
    size_t     *rcpt;               /* indexes into env->rcpt */
    size_t      nrcpt;
    struct mta_result *res;       /* nrcpt entries, filled by the relay */
    mta_done_fn *done;
    void       *arg;
    int         cut;                /* set by mta_abort(): res[] unused */
    /* private to relay.c */
    struct mta_txn *next;
    int         accepted;           /* RCPTs the peer accepted */
    int         restarts;           /* fresh connections after a stale one */
};

struct relay;
struct config_mta_timeouts;

/* conns_per_dest: this worker's cap of connections per destination. */
struct relay *mta_new(struct ev_loop *loop, const char *helo_name,
            uint64_t connect_timeout_ms, unsigned conns_per_dest);
/* delivery.timeouts (copied); mta_new() starts from RFC 5321's. */
void    mta_set_timeouts(struct relay *r,
            const struct config_mta_timeouts *t);
void    mta_free(struct relay *r);            /* closes every connection */
void    mta_submit(struct relay *r, struct mta_txn *t);
/* An address literal (IPv4, or IPv6 without brackets) as a hop; 0, or -1
 * when name is not one.  No DNS. */
int     mta_hop_literal(const char *name, unsigned port, struct mta_hop *out);
/* The stop deadline: done() for transactions already finished; then
 * every other one is cut (its connection closed, nothing sent on) and
 * handed back at once through done() with cut set and its results
 * meaningless, except one whose final dot is out: it may still read its
 * reply for dot_grace_ms (then it times out like any stall).  No new
 * transaction starts afterwards. */
void    mta_abort(struct relay *r, uint64_t dot_grace_ms);
/* Close idle connections now and keep none idle from here on. */
void    mta_drain(struct relay *r);
/* Connections open (busy or idle), for tests and drain. */
size_t  mta_nconns(const struct relay *r);

#endif /* MTAD_MTA_H */
