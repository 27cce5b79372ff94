/*
 * resolve.h - the next hops of an SMTP transaction from DNS (RFC 5321
 * 5.1), inside the worker's event loop.  Internal to delivery/: deliver.c
 * calls resolve_submit() where it used to call mta_submit(); the pure
 * parts (flattening, loop detection, outcome mapping) are here for the
 * unit test.
 *
 * CONTRACT  One struct resolve per worker, with one struct dns (dns.h)
 *           built from the dns.* keys.  resolve_submit() finds the
 *           addresses of t: for an `mx` route the MX of `domain` (the
 *           recipients' own domain), for `smtp:domain` the MX of domain,
 *           for `smtp:[host]` the host's A/AAAA, address literals as they
 *           are; a fail-over list is the concatenation in route order.
 *           With addresses it hands t to the relay (mta_submit) with
 *           t->hops set; without, it completes t with a verdict for every
 *           recipient, calling t->done() from the loop, never from inside
 *           resolve_submit().  t->hops stays valid until done() ran.
 *           Outcomes:  null MX      -> bounce 550 5.1.10
 *                      NXDOMAIN     -> bounce 550 5.1.2 (a recipient
 *                                      domain) or 5.4.4 (a route's host)
 *                      TEMPFAIL     -> defer 451 4.4.3
 *                      NODATA       -> defer 451 4.4.3 (as Postfix: no
 *                                      MX host has an address now; it
 *                                      bounces at max_queue_time)
 *                      loops back   -> bounce 550 5.4.6
 *           Loop detection: an MX host is this server when its name is
 *           relay.yaml's hostname or one of its addresses with the MX port
 *           is one of our listeners (a wildcard listener 0.0.0.0 / :: means
 *           every local address, from getifaddrs() at worker start, and
 *           127.0.0.0/8, ::1).  As Postfix: the hosts at and after the
 *           best preference that is ours are dropped; when that leaves
 *           none, the mail loops back to myself.
 *           DANE (tlspol.h, RFC 7672): hops whose tls.level is dane or
 *           dane-only get the TLSA records of their host when the MX
 *           answer (none needed for a host route) and the host's address
 *           answers were DNSSEC-secure; then, per hop: usable records ->
 *           tls.tlsa set (owned by the job, valid until done()); secure
 *           but none usable -> encrypt (dane) or not tried (dane-only);
 *           no secure TLSA -> may (dane) or not tried (dane-only); TLSA
 *           lookup failed -> not tried.  No hop left -> defer 451 4.7.5
 *           with tls.failure "dane-required" or "dnssec-invalid".
 * FAILURE   A resolver that cannot be created (bad resolv.conf) is logged
 *           once by resolve_new(); lookups then defer with 4.4.3, literal
 *           routes still work.
 */
#ifndef MTAD_RESOLVE_H
#define MTAD_RESOLVE_H

#include <stddef.h>

#include "dns/dns.h"
#include "delivery/mta.h"

struct ev_loop;
struct config;
struct resolve;

struct resolve *resolve_new(struct ev_loop *loop, const struct config *cfg);
void    resolve_free(struct resolve *rs);   /* cancels lookups; NULL ok */
/* domain: the recipients' domain for an mx route (else unused). */
void    resolve_submit(struct resolve *rs, struct mta *relay,
            struct mta_txn *t, const char *domain);
/* The worker's resolver, for other lookups (TLS-RPT's TXT); NULL when it
 * could not be set up. */
struct dns *resolve_dns(struct resolve *rs);

/* The stop: every transaction still waiting for DNS (nothing sent yet)
 * comes back through its done() with t->cut set, from the loop; lookups
 * are cancelled.  Those already handed to the relay are mta_abort()'s.
 * Returns how many were cut. */
size_t  resolve_cut(struct resolve *rs);

/* ---- pure parts, for the unit test ---- */

/* Who we are, for loop detection. */
struct resolve_self_addr {
    struct dns_addr a;
    unsigned        port;
};

struct resolve_self {
    const char     *hostname;       /* relay.yaml hostname (NULL: none) */
    struct resolve_self_addr *addr; /* listeners, wildcards expanded */
    size_t          naddr;
    unsigned       *lo_ports;       /* ports of wildcard listeners: any */
    size_t          nlo;            /* 127/8 or ::1 address is ours */
};

/* 1 when host h (reached on port) is this server. */
int     resolve_is_self(const struct resolve_self *self,
            const struct dns_host *h, unsigned port);

/* Outcome of flattening one destination. */
enum resolve_rc { RESOLVE_OK = 0, RESOLVE_LOOP = -1, RESOLVE_NONE = -2 };

/*
 * The addresses of dest (status DNS_OK) in the order to try, appended to
 * out[*n..max): hosts in dest order, each host's addresses in order, at
 * most max in all, after dropping the hosts that are ours and every host
 * at or after the preference of the best one that is (RFC 5321 5.1).
 * RESOLVE_OK when at least one was appended, RESOLVE_LOOP when the best
 * host is ours, RESOLVE_NONE when nothing was left (max reached).
 */
int     resolve_flatten(const struct dns_dest *dest, unsigned port,
            const struct resolve_self *self, struct mta_hop *out,
            size_t max, size_t *n);

/*
 * The verdict for a destination that gave no address: status MTA_BOUNCE
 * or MTA_DEFER, and the reply in SMTP form.  rcpt_domain: 1 when the
 * name looked up is the recipients' own domain (an mx route).
 */
enum mta_status resolve_verdict(const struct dns_dest *dest,
            int rcpt_domain, char *reply, size_t replysz);

struct sts_policy;
/*
 * resolve_tls.c - MTA-STS enforcement (RFC 8461 4.1, 5): the policy p
 * (tlspol.h) of a domain applied to the hops of its domain.
 * enforce: only the hops whose MX name matches a pattern stay, each
 *   marked to need STARTTLS with a certificate that verifies against
 *   tls.ca_file for that name; when none stays, -1 and reply is the
 *   deferral ("451 4.7.5 ...").
 * testing: every hop stays; the ones that do not match are logged (and
 *   counted for TLS-RPT), delivery goes on.
 * none: nothing changes.  Returns 0 (or -1 as above).
 */
int     resolve_sts_hops(const struct sts_policy *p, const char *domain,
            struct mta_hop *hop, size_t *n, char *reply, size_t replysz);

#endif /* MTAD_RESOLVE_H */
