/*
 * dane.h - DANE for SMTP (RFC 7672; RFC 6698, 7671): which MX hosts get a
 * TLSA lookup, which records are usable, what that makes of the hop's TLS
 * requirement, and the OpenSSL glue that checks the server against the
 * records.  Internal to delivery/: resolve.c looks the records up and
 * refines the hops; the TLS client (mta_session.c's enforcement point)
 * calls the glue around the handshake.
 *
 * TRUST     `secure` is the AD bit of the answers of dns.servers, a local
 *           validating resolver (dns.h).  TLSA records are only looked up
 *           when the MX answer (for a non-MX route: nothing) and the MX
 *           host's address answers were all secure (RFC 7672 2.2.1,
 *           2.2.2); and only a secure TLSA answer counts.
 * CONTRACT  Usable records (RFC 7672 3.1, 3.1.3): usage DANE-TA(2) or
 *           DANE-EE(3), selector Cert(0) or SPKI(1), matching type
 *           Full(0), SHA2-256(1) or SHA2-512(2), with data of the right
 *           shape (a digest of the right length, or DER that parses).
 *           PKIX-TA(0) and PKIX-EE(1) are unusable in SMTP (RFC 7672 3.1.3).
 *           One host's outcome (enum dane_state):
 *             secure TLSA with usable records -> DANE_USABLE: the server
 *               must match one of them;
 *             secure TLSA, none usable        -> DANE_UNUSABLE: TLS is
 *               mandatory, the certificate is not checked (RFC 7672 2.2);
 *             no secure TLSA (validated NXDOMAIN/NODATA, an insecure
 *               answer, or no lookup because the MX or address answers
 *               were insecure)                 -> DANE_NONE: not DANE;
 *             lookup failed (SERVFAIL, bogus, timeout) -> DANE_TEMPFAIL:
 *               the host is not tried (RFC 7672 2.2: a temporary failure).
 *           CNAMEs (RFC 7672 2.2.3): when the host's addresses came through
 *           CNAMEs (dns_host.target != name), TLSA is asked first at the
 *           expanded name, and at the original name when that gives none.
 *           Reference names for DANE-TA(2) (RFC 7672 3.2.2): the TLSA base
 *           domain, the MX host name as in the MX record, and the next-hop
 *           domain; DANE-EE(3) checks no name (RFC 7672 3.2.1).
 * FAILURE   Never logs.  Lookups always complete through their callback
 *           (from the loop); the glue returns 0 or -1 with a reason.
 */
#ifndef MTAD_DANE_H
#define MTAD_DANE_H

#include <stddef.h>

#include "dns/dns.h"
#include "delivery/tls_policy.h"

struct ssl_st;
struct ssl_ctx_st;

enum dane_state {
    DANE_NONE = 0,              /* not DANE: no secure TLSA */
    DANE_USABLE,                /* usable records: authenticate */
    DANE_UNUSABLE,              /* secure TLSA, none usable: encrypt */
    DANE_TEMPFAIL               /* TLSA lookup failed: skip the host */
};

const char *dane_state_name(enum dane_state s); /* "none", "usable"... */

/* 1 when the record can authenticate an SMTP server (see CONTRACT). */
int     dane_usable(const struct dns_tlsa *t);

/*
 * The state of one TLSA answer, and for DANE_USABLE a new rrset (name,
 * ttl and secure copied) holding only its usable records in *usable
 * (else NULL); free it with dns_rrset_free().
 */
enum dane_state dane_classify(const struct dns_rrset *set,
            struct dns_rrset **usable);

/* The TLSA base domain of an rrset name "_25._tcp.mx.example" ->
 * "mx.example"; 0, or -1 when name has no "_port._tcp." prefix. */
int     dane_base_domain(const char *tlsa_name, char *out, size_t outsz);

/* What a hop's TLS level becomes given its host's state. */
enum dane_action {
    DANE_ACT_AUTH = 0,          /* authenticate with the usable records */
    DANE_ACT_ENCRYPT,           /* mandatory TLS, no certificate check */
    DANE_ACT_FALLBACK,          /* not DANE: dane -> may; dane-only defers
                                   for want of TLSA ("dane-required") */
    DANE_ACT_SKIP               /* do not try this host (TLSA tempfail) */
};
/* dane_only: the level is dane-only (DANE required), else dane.  Under
 * dane-only a secure TLSA rrset with no usable record defers like no
 * TLSA (as Postfix's dane-only): only DANE authentication will do. */
enum dane_action dane_decide(int dane_only, enum dane_state st);

/* ---- the TLSA lookups of one transaction's MX hosts ---- */

struct dane_host {
    char              name[DNS_NAME_MAX];   /* MX host as in the MX record */
    unsigned          port;
    enum dane_state   state;
    struct dns_rrset *usable;               /* DANE_USABLE: the records */
    char              why[256];             /* DANE_TEMPFAIL: the reason */
};

/*
 * One hop's TLS requirement refined by its host's outcome dh (NULL: no
 * TLSA was looked up, as for an insecure MX: DANE_NONE); levels other than
 * dane and dane-only are left alone.  dane_decide()'s action: AUTH sets
 * r->tlsa = dh->usable (valid as long as dh); ENCRYPT sets TLS_ENCRYPT;
 * FALLBACK sets TLS_MAY under dane.  0: try the hop.  -1: do not (TLSA
 * lookup failed; dane-only without usable TLSA), with the SMTP reason
 * ("451 4.7.5 ...", host named) in reply and the RFC 8460 result type in
 * *failure ("dnssec-invalid", "dane-required").
 */
int     dane_refine(struct tls_req *r, const char *host,
            const struct dane_host *dh, char *reply, size_t replysz,
            const char **failure);

struct dane_lookup;
typedef void dane_done_fn(void *arg);

/* Lookups through d (must not be NULL); fn(arg) once when every lookup
 * that dane_lookup_start() started is back, from the loop. */
struct dane_lookup *dane_lookup_new(struct dns *d, dane_done_fn *fn,
            void *arg);
/* Ask for host h on port (once per name and port; the caller has checked
 * that the MX answer and h's addresses were secure). */
void    dane_lookup_add(struct dane_lookup *l, const struct dns_host *h,
            unsigned port);
/* 1 when lookups started (fn will be called), 0 when none were needed
 * (fn is never called). */
int     dane_lookup_start(struct dane_lookup *l);
/* The outcome for name/port, or NULL when it was not asked. Valid until
 * dane_lookup_free(). */
const struct dane_host *dane_lookup_find(const struct dane_lookup *l,
            const char *name, unsigned port);
void    dane_lookup_free(struct dane_lookup *l); /* cancels; NULL ok */

/* ---- the OpenSSL glue ---- */

/* Enable DANE on the client context (once, before any SSL of it uses
 * dane_ssl_prepare()).  0, or -1 with err. */
int     dane_ctx_enable(struct ssl_ctx_st *ctx, char *err, size_t errsz);

/*
 * Before the handshake of a client SSL: the usable records of tlsa (the
 * rrset dane_classify() made), the reference names (TLSA base domain from
 * tlsa->name, mxname, nexthop; NULL or "" skipped), no name check for
 * DANE-EE, and the TLSA base domain as SNI (RFC 7672 8.1).  The handshake itself does not fail on a mismatch (verify mode
 * none): dane_ssl_verdict() decides after it, so that the session can end
 * with QUIT and the failure is named.  0, or -1 with err (no record could
 * be added: every one malformed, or no memory).
 */
int     dane_ssl_prepare(struct ssl_st *ssl, const struct dns_rrset *tlsa,
            const char *mxname, const char *nexthop, char *err,
            size_t errsz);

/*
 * After a completed handshake on an SSL prepared above: 0 when a TLSA
 * record matched the chain and the chain verified (names included for
 * DANE-TA); -1 when not, with the RFC 8460 result type in failure
 * ("tlsa-invalid": no record matched; "certificate-host-mismatch";
 * "certificate-expired"; "validation-failure") and OpenSSL's reason in
 * detail.  A resumed session carries no DANE match of its own: -1, so
 * the caller must not resume sessions on DANE connections.
 */
int     dane_ssl_verdict(struct ssl_st *ssl, char *failure, size_t fsz,
            char *detail, size_t dsz);

#endif /* MTAD_DANE_H */
