/*
 * reqtls.h - REQUIRETLS (RFC 8689) at delivery: what a message's flag
 * makes of each hop's TLS requirement, and whether a session may carry
 * it.  Internal to delivery/; pure functions (unit-tested), the callers
 * are the enforcement points of tls_policy.h.
 *
 * CONTRACT  The envelope (spool.h) says requiretls (MAIL ... REQUIRETLS
 *           was given when the message came in over TLS) or tls_optional
 *           (a "TLS-Required: No" field, no REQUIRETLS); never both.
 *   REQUIRETLS (RFC 8689 4.2.1), in delivery order:
 *     1. resolve.c, once the hops are final (after DANE and MTA-STS),
 *        calls reqtls_hop() for every hop: a hop found through an MX
 *        answer that was not DNSSEC-secure is dropped unless an MTA-STS
 *        policy in enforce mode covers it (step 2); the others get a level
 *        that authenticates the server: verify (CA chain and the MX or
 *        route host name), or DANE when the host has usable TLSA, or
 *        MTA-STS.  The txn's own tls (the destination key) is raised the
 *        same way, so a REQUIRETLS txn never queues behind, nor rides, a
 *        connection set up for less (tls_req_same()).  No hop left: every
 *        recipient bounces with 5.7.10.
 *     2. mta_session.c, after the EHLO that follows the handshake, asks
 *        reqtls_session(): the peer authenticated (verify=dane|sts|ca) and
 *        REQUIRETLS in its EHLO reply (step 5); else that host fails with
 *        the 5xx reason and the next host is tried (as for any host
 *        failure); the last host's 5xx bounces the recipients.  A TLS
 *        failure on a REQUIRETLS txn's connection (no STARTTLS, a failed
 *        handshake or check) is 5.7.10 the same way (reqtls_tls_failed()).
 *        An idle connection carries a REQUIRETLS txn only when
 *        reqtls_session() says yes for it.
 *     3. MAIL FROM gets " REQUIRETLS" (reqtls_mail_param()).
 *     Bounces (RFC 8689 5): the DSN of a REQUIRETLS message is RET=HDRS
 *     and is itself sent with REQUIRETLS (attempt.c); as its reverse path
 *     is null, a next hop without the keyword does not stop it (the RFC:
 *     it SHOULD NOT be discarded for that), but it still goes only over
 *     authenticated TLS, without the MAIL parameter.
 *   TLS-Required: No (RFC 8689 4.2.2): reqtls_optional() drops the
 *     recipient domain's own policies from each hop: DANE's TLSA records
 *     (dane: as may) and MTA-STS enforce; the operator's levels
 *     (encrypt, verify, dane-only from relay.yaml or the policy table)
 *     stay.  STARTTLS is still used when offered (level may).
 * FAILURE   None: the functions decide, the callers act and log.
 */
#ifndef MTAD_REQTLS_H
#define MTAD_REQTLS_H

#include <stddef.h>

#include "delivery/tls_policy.h"

struct spool_env;

enum reqtls_mode {
    REQTLS_NONE = 0,            /* the usual policy */
    REQTLS_REQUIRE,             /* MAIL ... REQUIRETLS */
    REQTLS_OPTIONAL             /* TLS-Required: No */
};

enum reqtls_mode reqtls_mode(const struct spool_env *env);

/* Raise r so that the server must authenticate: dane-only when it has
 * TLSA records (tlsa != NULL), unchanged under MTA-STS enforce, else at
 * least verify.  Idempotent. */
void    reqtls_raise(struct tls_req *r);

/* Step 1 for one hop of a REQUIRETLS txn.  mx: the hop came from an MX
 * answer (not a route's own host); mx_secure: that answer was
 * DNSSEC-secure.  Returns 0 with r raised, or -1 (the hop must not be
 * tried) with why = "550 5.7.10 ..." naming host. */
int     reqtls_hop(struct tls_req *r, int mx, int mx_secure,
            const char *host, char *why, size_t whysz);

/* TLS-Required: No: r without the recipient domain's policies. */
void    reqtls_optional(struct tls_req *r);

/* Step 2: may this session carry a REQUIRETLS message?  o: the
 * connection's TLS outcome; caps: its EHLO capabilities (SMTP_CAP_*);
 * null_sender: the message is a bounce (the keyword is not needed).
 * host: "host[ip]:port".  0, or -1 with why = "550 5.7.10 ..." (no
 * authenticated TLS) or "550 5.7.30 ..." (no REQUIRETLS keyword). */
int     reqtls_session(const struct tls_outcome *o, unsigned caps,
            int null_sender, const char *host, char *why, size_t whysz);

/* A TLS policy failure (detail: tls_defer_reason()'s text or the like)
 * on a REQUIRETLS message's connection, as its 5.7.10 reason. */
void    reqtls_tls_failed(const char *host, const char *detail, char *why,
            size_t whysz);

/* " REQUIRETLS" for MAIL FROM when the message has the flag and the
 * peer offered the keyword, else "". */
const char *reqtls_mail_param(const struct spool_env *env, unsigned caps);

#endif /* MTAD_REQTLS_H */
