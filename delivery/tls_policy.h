/*
 * tls_policy.h - outbound TLS: what one connection attempt to one MX host
 * must satisfy (struct tls_req), what it got (struct tls_outcome), and the
 * pure decisions between the two.  Internal to delivery/; the seam that
 * the DANE, MTA-STS, REQUIRETLS and TLS-RPT parts build on.
 *
 * CONTRACT  Data path, in order:
 *   1. resolve.c, before mta_submit(), fills hop->tls (struct mta_hop in
 *      mta.h) for every hop of the txn: the level from the policy table
 *      (router LMDB "tls" DB: recipient domain, then route key) or else
 *      relay.yaml delivery.tls; policy_domain = the recipient domain (or
 *      the route's host); verify_name = the MX host name (hop->name).
 *      DANE (dane helper) and MTA-STS (sts helper) refine the hops there,
 *      between the MX answer and mta_submit(): a usable TLSA rrset sets
 *      level TLS_DANE and tlsa; an STS policy in enforce mode sets
 *      sts_enforce (and drops hops whose name does not match; RFC 8461).
 *      Pointers in a tls_req (tlsa) live as long as the hops: until the
 *      txn's done() ran.  Nothing else in delivery/ changes a tls_req.
 *   2. mta_session.c enforces it on the connection: STARTTLS when offered
 *      (or required), tls_client_prepare() on the SSL before the
 *      handshake (SNI, host check, DANE), tls_client_verdict() after it,
 *      then tls_decide() says go on, retry plaintext, or defer.
 *   3. The result: every struct mta_result carries the tls_outcome of
 *      the connection the recipient's verdict came from (used = 0 when
 *      it never got that far or went in plaintext).  deliver/attempt.c
 *      logs tls_outcome_format() and stores it per recipient (mtactl
 *      show); reqtls and tlsrpt read it there.
 *   Connection reuse: an idle connection carries a txn only when
 *   tls_req_same(connection's req, hop's req) (mta.c): a connection
 *   verified for one policy never serves a destination that needs another.
 * Levels   none     never STARTTLS.
 *          may      STARTTLS when offered, no certificate check; a failed
 *                   handshake retries the same host once in plaintext.
 *          encrypt  STARTTLS required, no certificate check; else defer.
 *          verify   STARTTLS required, the chain verified against
 *                   tls.ca_file and verify_name matched; else defer.
 *          dane     DANE when hop has usable TLSA (tlsa != NULL: then as
 *                   dane-only), else as may (RFC 7672 2.2, opportunistic).
 *          dane-only DANE required: no usable TLSA defers ("no usable
 *                   TLSA"), a TLSA mismatch defers.
 *          sts_enforce on any level: STARTTLS and a CA-verified
 *                   verify_name required (verify=sts); DANE wins when the
 *                   host has usable TLSA (RFC 8461 2).
 *          Every deferral of a policy failure is "451 4.7.5 ..." (RFC
 *          3463 4.7.5: cryptographic failure) or 4.7.4 for STARTTLS not
 *          offered, and moves on to the next MX host like any 4xx.
 * FAILURE  The pure functions never fail except as documented; nothing
 *          here logs.
 */
#ifndef MTAD_TLS_POLICY_H
#define MTAD_TLS_POLICY_H

#include <stddef.h>

struct dns_rrset;
struct ssl_st;
struct ssl_ctx_st;

enum tls_level {
    TLS_NONE = 0, TLS_MAY, TLS_ENCRYPT, TLS_VERIFY, TLS_DANE, TLS_DANE_ONLY
};
#define TLS_LEVEL_UNSET (-1)    /* no entry: the next source decides */

enum tls_auth {                 /* verify=none|ca|dane|sts */
    TLS_AUTH_NONE = 0, TLS_AUTH_CA, TLS_AUTH_DANE, TLS_AUTH_STS
};

#define TLS_NAME_MAX 256

struct tls_req {
    enum tls_level level;               /* effective for this host */
    char  policy_domain[TLS_NAME_MAX];  /* recipient domain (TLS-RPT, logs) */
    char  verify_name[TLS_NAME_MAX];    /* name to check in the cert (MX) */
    int   sts_enforce;                  /* MTA-STS enforce: CA-verify name */
    int   sts_testing;                  /* MTA-STS testing: check the name
                                           as sts_enforce would, record a
                                           failure, deliver anyway */
    /* DANE: usable TLSA records of this host (dane helper fills them);
     * NULL: none.  Owned by whoever built the hops. */
    const struct dns_rrset *tlsa;
};

/* RFC 8460 4.3 result types used in tls_outcome.failure. */
#define TLS_FAIL_STARTTLS      "starttls-not-supported"
#define TLS_FAIL_HOST_MISMATCH "certificate-host-mismatch"
#define TLS_FAIL_EXPIRED       "certificate-expired"
#define TLS_FAIL_NOT_TRUSTED   "certificate-not-trusted"
#define TLS_FAIL_VALIDATION    "validation-failure"
#define TLS_FAIL_TLSA_INVALID  "tlsa-invalid"
#define TLS_FAIL_DANE_REQUIRED "dane-required"

struct tls_outcome {
    int   used;                 /* TLS was negotiated on this connection */
    int   resumed;              /* the handshake resumed a cached session */
    enum tls_auth auth;         /* how the peer was authenticated */
    char  version[16];          /* "TLSv1.3" */
    char  cipher[64];           /* OpenSSL's name */
    char  failure[64];          /* TLS_FAIL_* when it failed, or "" */
};

/* ---- names (relay.yaml, the policy table, mtactl, logs) ---- */

/* "none", "may", "encrypt", "verify", "dane", "dane-only". */
const char *tls_level_name(enum tls_level l);
/* 0 and *out, or -1 for anything else (exact, lower case). */
int     tls_level_parse(const char *s, enum tls_level *out);
/* "none", "ca", "dane", "sts". */
const char *tls_auth_name(enum tls_auth a);

/* "tls=TLSv1.3 cipher=TLS_AES_256_GCM_SHA384 verify=ca", or "tls=none"
 * when !o->used; a failure adds " tls_failure=<type>".  Returns the
 * length (truncated to outsz - 1, always terminated). */
size_t  tls_outcome_format(const struct tls_outcome *o, char *out,
            size_t outsz);

/* ---- decisions (pure; unit-tested) ---- */

/* 1 when an idle connection set up under a may carry a txn needing b:
 * same level, verify_name (case-insensitive), sts_enforce, and both or
 * neither with TLSA. */
int     tls_req_same(const struct tls_req *a, const struct tls_req *b);

/* Whether STARTTLS is required (level and sts_enforce, given TLSA). */
int     tls_req_mandatory(const struct tls_req *r);
/* Whether the chain must be verified (verify, sts, dane with TLSA). */
int     tls_req_authenticated(const struct tls_req *r);

enum tls_step {
    TLS_GO_PLAIN = 0,           /* go on without TLS */
    TLS_GO_STARTTLS,            /* send STARTTLS */
    TLS_GO_ON,                  /* TLS up and good enough: EHLO again */
    TLS_RETRY_PLAIN,            /* reconnect the same host in plaintext */
    TLS_DEFER                   /* policy failure: 4.7.x, next host */
};

/* After EHLO: offered = STARTTLS in the caps; plain_retry = this is the
 * plaintext retry of a failed handshake. */
enum tls_step tls_decide_ehlo(const struct tls_req *r, int offered,
            int plain_retry);
/* After the handshake: ok = it completed; o = tls_client_verdict()'s. */
enum tls_step tls_decide_handshake(const struct tls_req *r, int ok,
            const struct tls_outcome *o);

/* The SMTP reason for a TLS_DEFER ("451 4.7.5 TLS is required, but ..."),
 * with host = "host[ip]:port" and detail escaped by the caller. */
void    tls_defer_reason(const struct tls_req *r, const char *host,
            const char *detail, char *out, size_t outsz);

/* ---- the client context and per-connection set-up (tls_client.c) ---- */

struct tls_client_opts {
    const char *ca_file;        /* NULL or "": the system's default paths */
    size_t      cache_max;      /* sessions kept; 0 = 1000 */
    unsigned    cache_ttl_s;    /* a session is offered at most this long
                                   after it was made; 0 = 3600 */
};

/* The client SSL_CTX: TLS 1.2+, groups as net.h, CA from opts (loaded
 * now: call before the sandbox).  NULL with err set. */
struct ssl_ctx_st *tls_client_ctx(const struct tls_client_opts *o,
            char *err, size_t errsz);

/* Before the handshake: SNI = verify_name (none for an address literal),
 * the name (or address) to check.  DANE plugs in here and in the two
 * functions around it: SSL_CTX_dane_enable() in tls_client_ctx(),
 * SSL_dane_enable() + SSL_dane_tlsa_add() here when r->tlsa is set, and
 * TLS_AUTH_DANE in tls_client_verdict() when SSL_get0_dane_authority()
 * is >= 0.  0, or -1 with err. */
int     tls_client_prepare(struct ssl_st *ssl, const struct tls_req *r,
            char *err, size_t errsz);
/* After a completed handshake: fills o (used, version, cipher, auth,
 * failure when the check the level needs failed).  Returns 0 when the
 * peer satisfies r, -1 when not (o->failure says why). */
int     tls_client_verdict(struct ssl_st *ssl, const struct tls_req *r,
            struct tls_outcome *o);
/* Why the certificate check failed, as text for a deferral. */
void    tls_client_why(struct ssl_st *ssl, char *out, size_t outsz);

/* ---- the outbound session cache (tls_cache.c; issue 20) ---- */

/* One per worker (struct mta), shared by all its connections: the last
 * SSL_SESSION per key "destination|host|level", at most max entries
 * (least recently used dropped first), each offered for at most ttl_s
 * seconds.  Times are monotonic ms, passed in (the unit test's clock). */
struct ssl_session_st;
struct tls_cache;
struct tls_cache *tls_cache_new(size_t max, unsigned ttl_s);
void    tls_cache_free(struct tls_cache *c);                    /* NULL ok */
/* A session to offer (a reference the caller frees with SSL_SESSION_free,
 * or hands to SSL_set_session and then frees), or NULL. */
struct ssl_session_st *tls_cache_get(struct tls_cache *c, const char *key,
            unsigned long long now_ms);
/* Keeps a reference to s (replacing the key's previous one). */
void    tls_cache_put(struct tls_cache *c, const char *key,
            struct ssl_session_st *s, unsigned long long now_ms);
void    tls_cache_del(struct tls_cache *c, const char *key);
size_t  tls_cache_count(const struct tls_cache *c);

#endif /* MTAD_TLS_POLICY_H */
