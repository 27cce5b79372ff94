/*
 * tlspol.h - outbound TLS policy: the contract of tlspol/, the one header
 * other modules include.  What a connection to an MX host must satisfy,
 * where that requirement comes from and how it is checked: the levels and
 * decisions (tls_policy.c), the client context and its per-connection
 * checks (tls_client.c), the session cache (tls_cache.c), DANE
 * (dane.c), MTA-STS looked up, fetched and cached (sts.c, sts_fetch.c,
 * sts_policy.c), REQUIRETLS (reqtls.c) and TLS-RPT's counting and
 * reports (tlsrpt.c, tlsrpt_outcome.c, tlsrpt_report.c).
 *
 * LAYERING  tlspol/ sits below delivery/: it knows no destination, hop,
 *           connection or transaction of the outbound client.  The client
 *           (delivery/mta_session.c, mta_tls.c) hands it a struct tls_req
 *           and the SSL of a connection; resolve.c hands it the hops'
 *           requirements to refine.  What it needs of the rest is here:
 *           the envelope (spool.h), DNS (dns.h), MTA-STS text (sts.h).
 * PREFIX    tls_ for every name here; each section adds its own word:
 *           tls_ (the policy, client, cache), tls_dane_, tls_sts_,
 *           tls_reqtls_, tls_rpt_ (upper case for constants alike).
 * FAILURE   Nothing here logs except the MTA-STS cache and its fetches
 *           (sts.c, sts_fetch.c: a policy that fails or falls back, a
 *           fetch that cannot start); see each section.
 *
 * The sections follow, each with its own contract.
 */
#ifndef MTAD_TLSPOL_H
#define MTAD_TLSPOL_H

#include <stddef.h>
#include <stdint.h>

#include "dns/dns.h"
#include "sts/sts.h"

/* ==== the policy: requirement, outcome, decisions, client, cache ==== */

/*
 * The policy - what one connection attempt to one MX host
 * must satisfy (struct tls_req), what it got (struct tls_outcome), and the
 * pure decisions between the two; the seam that
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
 *      txn's done() ran.  Nothing else changes a tls_req.
 *   2. delivery/mta_tls.c enforces it on the connection: STARTTLS when
 *      offered
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

/* ---- the outbound session cache (tls_cache.c) ---- */

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

/* ==== DANE (RFC 7672) ==== */

/*
 * DANE for SMTP (RFC 7672; RFC 6698, 7671): which MX hosts get a
 * TLSA lookup, which records are usable, what that makes of the hop's TLS
 * requirement, and the OpenSSL glue that checks the server against the
 * records.  delivery/resolve.c looks the records up and refines the
 * hops; the TLS client (delivery/mta_tls.c, the enforcement point) calls
 * the glue around the handshake.
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
 *           One host's outcome (enum tls_dane_state):
 *             secure TLSA with usable records -> TLS_DANE_USABLE: the server
 *               must match one of them;
 *             secure TLSA, none usable        -> TLS_DANE_UNUSABLE: TLS is
 *               mandatory, the certificate is not checked (RFC 7672 2.2);
 *             no secure TLSA (validated NXDOMAIN/NODATA, an insecure
 *               answer, or no lookup because the MX or address answers
 *               were insecure)                 -> TLS_DANE_NONE: not DANE;
 *             lookup failed (SERVFAIL, bogus, timeout) -> TLS_DANE_TEMPFAIL:
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

struct ssl_st;
struct ssl_ctx_st;

enum tls_dane_state {
    TLS_DANE_NONE = 0,              /* not DANE: no secure TLSA */
    TLS_DANE_USABLE,                /* usable records: authenticate */
    TLS_DANE_UNUSABLE,              /* secure TLSA, none usable: encrypt */
    TLS_DANE_TEMPFAIL               /* TLSA lookup failed: skip the host */
};

const char *tls_dane_state_name(enum tls_dane_state s); /* "none", "usable"... */

/* 1 when the record can authenticate an SMTP server (see CONTRACT). */
int     tls_dane_usable(const struct dns_tlsa *t);

/*
 * The state of one TLSA answer, and for TLS_DANE_USABLE a new rrset (name,
 * ttl and secure copied) holding only its usable records in *usable
 * (else NULL); free it with dns_rrset_free().
 */
enum tls_dane_state tls_dane_classify(const struct dns_rrset *set,
            struct dns_rrset **usable);

/* The TLSA base domain of an rrset name "_25._tcp.mx.example" ->
 * "mx.example"; 0, or -1 when name has no "_port._tcp." prefix. */
int     tls_dane_base_domain(const char *tlsa_name, char *out, size_t outsz);

/* What a hop's TLS level becomes given its host's state. */
enum tls_dane_action {
    TLS_DANE_ACT_AUTH = 0,          /* authenticate with the usable records */
    TLS_DANE_ACT_ENCRYPT,           /* mandatory TLS, no certificate check */
    TLS_DANE_ACT_FALLBACK,          /* not DANE: dane -> may; dane-only defers
                                   for want of TLSA ("dane-required") */
    TLS_DANE_ACT_SKIP               /* do not try this host (TLSA tempfail) */
};
/* dane_only: the level is dane-only (DANE required), else dane.  Under
 * dane-only a secure TLSA rrset with no usable record defers like no
 * TLSA (as Postfix's dane-only): only DANE authentication will do. */
enum tls_dane_action tls_dane_decide(int dane_only, enum tls_dane_state st);

/* ---- the TLSA lookups of one transaction's MX hosts ---- */

struct tls_dane_host {
    char              name[DNS_NAME_MAX];   /* MX host as in the MX record */
    unsigned          port;
    enum tls_dane_state   state;
    struct dns_rrset *usable;               /* TLS_DANE_USABLE: the records */
    char              why[256];             /* TLS_DANE_TEMPFAIL: the reason */
};

/*
 * One hop's TLS requirement refined by its host's outcome dh (NULL: no
 * TLSA was looked up, as for an insecure MX: TLS_DANE_NONE); levels other than
 * dane and dane-only are left alone.  tls_dane_decide()'s action: AUTH sets
 * r->tlsa = dh->usable (valid as long as dh); ENCRYPT sets TLS_ENCRYPT;
 * FALLBACK sets TLS_MAY under dane.  0: try the hop.  -1: do not (TLSA
 * lookup failed; dane-only without usable TLSA), with the SMTP reason
 * ("451 4.7.5 ...", host named) in reply and the RFC 8460 result type in
 * *failure ("dnssec-invalid", "dane-required").
 */
int     tls_dane_refine(struct tls_req *r, const char *host,
            const struct tls_dane_host *dh, char *reply, size_t replysz,
            const char **failure);

struct tls_dane_lookup;
typedef void tls_dane_done_fn(void *arg);

/* Lookups through d (must not be NULL); fn(arg) once when every lookup
 * that tls_dane_lookup_start() started is back, from the loop. */
struct tls_dane_lookup *tls_dane_lookup_new(struct dns *d, tls_dane_done_fn *fn,
            void *arg);
/* Ask for host h on port (once per name and port; the caller has checked
 * that the MX answer and h's addresses were secure). */
void    tls_dane_lookup_add(struct tls_dane_lookup *l, const struct dns_host *h,
            unsigned port);
/* 1 when lookups started (fn will be called), 0 when none were needed
 * (fn is never called). */
int     tls_dane_lookup_start(struct tls_dane_lookup *l);
/* The outcome for name/port, or NULL when it was not asked. Valid until
 * tls_dane_lookup_free(). */
const struct tls_dane_host *tls_dane_lookup_find(
            const struct tls_dane_lookup *l, const char *name,
            unsigned port);
void    tls_dane_lookup_free(struct tls_dane_lookup *l); /* cancels; NULL ok */

/* ---- the OpenSSL glue ---- */

/* Enable DANE on the client context (once, before any SSL of it uses
 * tls_dane_ssl_prepare()).  0, or -1 with err. */
int     tls_dane_ctx_enable(struct ssl_ctx_st *ctx, char *err, size_t errsz);

/*
 * Before the handshake of a client SSL: the usable records of tlsa (the
 * rrset tls_dane_classify() made), the reference names (TLSA base domain from
 * tlsa->name, mxname, nexthop; NULL or "" skipped), no name check for
 * DANE-EE, and the TLSA base domain as SNI (RFC 7672 8.1).  The
 * handshake itself does not fail on a mismatch (verify mode none):
 * tls_dane_ssl_verdict() decides after it, so that the session can end
 * with QUIT and the failure is named.  0, or -1 with err (no record could
 * be added: every one malformed, or no memory).
 */
int     tls_dane_ssl_prepare(struct ssl_st *ssl, const struct dns_rrset *tlsa,
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
int     tls_dane_ssl_verdict(struct ssl_st *ssl, char *failure, size_t fsz,
            char *detail, size_t dsz);

/* ==== MTA-STS (RFC 8461) ==== */

/*
 * MTA-STS (RFC 8461) for delivery: the policy of a recipient
 * domain, looked up, fetched over HTTPS and cached inside the worker's
 * event loop (delivery/resolve.c asks, the TLS client
 * enforces through struct tls_req); the text parsers are sts/sts.h.
 *
 * HOW       tls_sts_get(domain): the `_mta-sts.<domain>` TXT record through
 *           our dns/ (its cache, its loop); a valid record whose id equals
 *           the cached policy's (unexpired) -> the cached policy, at once.
 *           Otherwise mta-sts.<domain> is resolved with dns/ too and the
 *           policy fetched from https://mta-sts.<domain>/.well-known/
 *           mta-sts.txt by libcurl's multi-socket API driven by this ev
 *           loop (no thread, no blocking call): the addresses are handed
 *           over with CURLOPT_RESOLVE (libcurl never reads resolv.conf),
 *           https only, no redirects (RFC 8461 3.3), TLS 1.2+, the
 *           certificate checked against the CA bundle given here (held in
 *           memory: the sandboxed worker opens no file), status 200 and
 *           Content-Type text/plain required, 64 KiB at most, one time
 *           limit for the whole fetch.  A policy is cached for its max_age
 *           with the id of the TXT record it came with.
 * WAITING   Mail to a domain waits, in memory, while the lookup or fetch of
 *           its policy runs (never longer than the DNS timeouts plus
 *           fetch_timeout); concurrent mail to the domain joins the same
 *           fetch.  Then, as RFC 8461 3.3 and 5.1 say:
 *             - no valid TXT record, or the lookup failed: the cached
 *               policy while unexpired, else no policy;
 *             - the fetch failed (any reason): the cached policy while
 *               unexpired (even with an older id), else no policy ("as
 *               though the domain has not deployed MTA-STS"); the same
 *               id is not fetched again for 5 minutes (else every message
 *               to a domain with a broken server would wait for it).
 * CONTRACT  One struct tls_sts per worker, on the worker's struct dns.
 *           tls_sts_get()'s callback runs exactly once, always from the loop
 *           (never inside tls_sts_get()), unless tls_sts_cancel() came first.
 *           The policy passed to it (NULL: none in force) is valid only
 *           during the call.  At most TLS_STS_CACHE_MAX domains are kept; the
 *           least recently used idle one goes first.
 * FAILURE   tls_sts_new() returns NULL with a reason (libcurl unusable); the
 *           caller then delivers without MTA-STS and says so once.  A
 *           failed fetch is logged (domain, reason), once per attempt.
 */

struct ev_loop;
struct dns;
struct tls_sts;
struct tls_sts_req;

#define TLS_STS_CACHE_MAX 10000

struct tls_sts_options {
    const char *ca_file;            /* PEM CA bundle, read into memory by
                                       tls_sts_new(); NULL: the system's */
    unsigned    port;               /* 443 (tests: another) */
    uint64_t    fetch_timeout_ms;   /* the whole HTTPS fetch */
};

/* The outcome for one domain: pol NULL when no policy is in force; why
 * says what happened ("cached id=...", "fetched id=...", "no TXT
 * record", "fetch failed: ..."), for the log. */
typedef void tls_sts_fn(const struct sts_policy *pol, const char *why,
            void *arg);

struct tls_sts *tls_sts_new(struct ev_loop *loop, struct dns *dns,
            const struct tls_sts_options *o, char *why, size_t whysz);
void    tls_sts_free(struct tls_sts *s);         /* cancels all; NULL ok */
/* 0, or -1 when domain cannot be a policy domain (too long, a literal):
 * then no callback. */
int     tls_sts_get(struct tls_sts *s, const char *domain, tls_sts_fn *fn,
            void *arg, struct tls_sts_req **reqp);
void    tls_sts_cancel(struct tls_sts_req *r);

/* ---- pure parts, for the unit test ---- */

enum tls_sts_txt {
    TLS_STS_TXT_ID = 0, TLS_STS_TXT_NONE, TLS_STS_TXT_TEMPFAIL
};
enum tls_sts_action {
    TLS_STS_USE_CACHED = 0, TLS_STS_FETCH, TLS_STS_NO_POLICY
};

/*
 * What to do after the TXT lookup: have/cached_id/expires_ms describe the
 * cached policy (have 0: none), txt the lookup's outcome with its id.
 */
enum tls_sts_action tls_sts_decide(int have, const char *cached_id,
            uint64_t expires_ms, uint64_t now_ms, enum tls_sts_txt txt,
            const char *txt_id);
/* The id of the one v=STSv1 record among n joined TXT strings (RFC 8461
 * 3.1: other records discarded; none or more than one valid -> no
 * policy): TLS_STS_TXT_ID with id filled, or TLS_STS_TXT_NONE with why. */
enum tls_sts_txt tls_sts_txt_pick(const char *const *txt, const size_t *len,
            size_t n, char *id, char *why, size_t whysz);
/* 1 when a Content-Type value is text/plain (parameters allowed). */
int     tls_sts_content_type_ok(const char *ct);

/* ==== REQUIRETLS (RFC 8689) ==== */

/*
 * REQUIRETLS (RFC 8689) at delivery: what a message's flag
 * makes of each hop's TLS requirement, and whether a session may carry
 * it.  Pure functions (unit-tested); the callers are the enforcement
 * points of the policy section above.
 *
 * CONTRACT  The envelope (spool.h) says requiretls (MAIL ... REQUIRETLS
 *           was given when the message came in over TLS) or tls_optional
 *           (a "TLS-Required: No" field, no REQUIRETLS); never both.
 *   REQUIRETLS (RFC 8689 4.2.1), in delivery order:
 *     1. resolve.c, once the hops are final (after DANE and MTA-STS),
 *        calls tls_reqtls_hop() for every hop: a hop found through an MX
 *        answer that was not DNSSEC-secure is dropped unless an MTA-STS
 *        policy in enforce mode covers it (step 2); the others get a level
 *        that authenticates the server: verify (CA chain and the MX or
 *        route host name), or DANE when the host has usable TLSA, or
 *        MTA-STS.  The txn's own tls (the destination key) is raised the
 *        same way, so a REQUIRETLS txn never queues behind, nor rides, a
 *        connection set up for less (tls_req_same()).  No hop left: every
 *        recipient bounces with 5.7.10.
 *     2. delivery/mta_session.c, after the EHLO that follows the handshake,
 *        asks tls_reqtls_session(): the peer authenticated (verify=dane|sts|ca)
 *        and REQUIRETLS in its EHLO reply (step 5); else that host fails with
 *        the 5xx reason and the next host is tried (as for any host failure);
 *        the last host's 5xx bounces the recipients.  A TLS failure on a
 *        REQUIRETLS txn's connection (no STARTTLS, a failed handshake or check)
 *        is 5.7.10 the same way (tls_reqtls_tls_failed()).  An idle connection
 *        carries a REQUIRETLS txn only when tls_reqtls_session() says yes for
 *        it.
 *     3. MAIL FROM gets " REQUIRETLS" (tls_reqtls_mail_param()).
 *     Bounces (RFC 8689 5): the DSN of a REQUIRETLS message is RET=HDRS
 *     and is itself sent with REQUIRETLS (attempt.c); as its reverse path
 *     is null, a next hop without the keyword does not stop it (the RFC:
 *     it SHOULD NOT be discarded for that), but it still goes only over
 *     authenticated TLS, without the MAIL parameter.
 *   TLS-Required: No (RFC 8689 4.2.2): tls_reqtls_optional() drops the
 *     recipient domain's own policies from each hop: DANE's TLSA records
 *     (dane: as may) and MTA-STS enforce; the operator's levels
 *     (encrypt, verify, dane-only from relay.yaml or the policy table)
 *     stay.  STARTTLS is still used when offered (level may).
 * FAILURE   None: the functions decide, the callers act and log.
 */

struct spool_env;

enum tls_reqtls_mode {
    TLS_REQTLS_NONE = 0,            /* the usual policy */
    TLS_REQTLS_REQUIRE,             /* MAIL ... REQUIRETLS */
    TLS_REQTLS_OPTIONAL             /* TLS-Required: No */
};

enum tls_reqtls_mode tls_reqtls_mode(const struct spool_env *env);

/* Raise r so that the server must authenticate: dane-only when it has
 * TLSA records (tlsa != NULL), unchanged under MTA-STS enforce, else at
 * least verify.  Idempotent. */
void    tls_reqtls_raise(struct tls_req *r);

/* Step 1 for one hop of a REQUIRETLS txn.  mx: the hop came from an MX
 * answer (not a route's own host); mx_secure: that answer was
 * DNSSEC-secure.  Returns 0 with r raised, or -1 (the hop must not be
 * tried) with why = "550 5.7.10 ..." naming host. */
int     tls_reqtls_hop(struct tls_req *r, int mx, int mx_secure,
            const char *host, char *why, size_t whysz);

/* TLS-Required: No: r without the recipient domain's policies. */
void    tls_reqtls_optional(struct tls_req *r);

/* Step 2: may this session carry a REQUIRETLS message?  o: the
 * connection's TLS outcome; caps: its EHLO capabilities (SMTP_CAP_*);
 * null_sender: the message is a bounce (the keyword is not needed).
 * host: "host[ip]:port".  0, or -1 with why = "550 5.7.10 ..." (no
 * authenticated TLS) or "550 5.7.30 ..." (no REQUIRETLS keyword). */
int     tls_reqtls_session(const struct tls_outcome *o, unsigned caps,
            int null_sender, const char *host, char *why, size_t whysz);

/* A TLS policy failure (detail: tls_defer_reason()'s text or the like)
 * on a REQUIRETLS message's connection, as its 5.7.10 reason. */
void    tls_reqtls_tls_failed(const char *host, const char *detail, char *why,
            size_t whysz);

/* " REQUIRETLS" for MAIL FROM when the message has the flag and the
 * peer offered the keyword, else "". */
const char *tls_reqtls_mail_param(const struct spool_env *env, unsigned caps);

/* ==== TLS-RPT (RFC 8460) ==== */

/*
 * SMTP TLS Reporting (RFC 8460): TLS outcomes counted per
 * policy, the counters' wire form between workers and master, and the
 * daily report (JSON, gzip, the mail that carries it).
 *
 * The worker and the master both use this section.
 *
 * CONTRACT  Recording: the TLS code of a worker calls tls_rpt_record() once
 *           per connection attempt's outcome (success, or the failure
 *           result type of RFC 8460 4.3).  It adds to the process's one
 *           table (a hash of policies; counters, no formatting, no
 *           allocation once the policy is known) for the current UTC day.
 *           Nothing is recorded until tls_rpt_enable(1).
 *           Aggregation: the worker's tick calls tls_rpt_export(), which
 *           hands each policy's counts to emit() as one policy block
 *           (a CHAN_TLSRPT_ADD payload, common/chan.h) and forgets the counts
 *           emit() took; the master merges them into its day table
 *           (tls_rpt_tab_merge()), shows it (tls_rpt_tab_text()), keeps it
 *           in a file (tls_rpt_tab_dump()/merge) and, once a day, hands
 *           each (day, domain) to a worker (tls_rpt_tab_take()), which
 *           looks up _smtp._tls.<domain> and queues the report
 *           (tlsrpt_send()).
 *           A policy is (day, domain, type, policy strings); each has
 *           success and failure counts and up to TLS_RPT_MAX_DETAILS
 *           failure details (result type, MX host, IP, reason code).
 *           Beyond the limits below, sessions are still counted in the
 *           summary and the overflow is counted (tls_rpt_tab_dropped()).
 * WIRE      A policy block, every field %XX-escaped (bytes <= 0x20, >=
 *           0x7f and '%'), "-" for an empty field:
 *             P <day> <sts|tlsa|no-policy-found> <domain> <ok> <fail>
 *             s <policy string>                    (0..16 lines)
 *             d <result> <mx> <ip> <count> <reason> (0..32 lines)
 *           day = UTC days since 1970-01-01.  Parsing is strict: a worker
 *           is less trusted than the master.
 * FAILURE   Nothing here logs.  Parsers return -1 with a sentence in err.
 */

enum tls_rpt_type {
    TLS_RPT_STS = 0,             /* "sts": an MTA-STS policy applied */
    TLS_RPT_TLSA,                /* "tlsa": DANE TLSA records applied */
    TLS_RPT_NOPOLICY             /* "no-policy-found" */
};

#define TLS_RPT_MAX_STRINGS   16         /* policy strings kept per policy */
#define TLS_RPT_MAX_STRING    1024       /* bytes of one policy string */
#define TLS_RPT_MAX_DETAILS   32         /* failure details per policy */
#define TLS_RPT_MAX_POLICIES  8192       /* policies per table */
/* Bytes a table may hold in all (policies, strings, details): the master
 * merges what workers send, and a worker is not trusted to keep it small. */
#define TLS_RPT_TAB_BYTES     ((size_t)16 << 20)
#define TLS_RPT_WIRE_MAX      60000      /* bytes of one channel message */
#define TLS_RPT_DOMAIN_MAX    256

/* One outcome.  Strings are copied when kept; NULL is "". */
struct tls_rpt_event {
    const char         *domain;     /* the policy domain (recipient's) */
    enum tls_rpt_type    type;
    const char *const  *strings;    /* RFC 8460 4.3 policy-string: STS
                                       policy lines, or TLSA records in
                                       presentation form ("3 1 1 ab..") */
    size_t              nstrings;
    const char         *result;     /* NULL or "": success; else a result
                                       type ("certificate-expired" ...) */
    const char         *mx;         /* receiving-mx-hostname */
    const char         *ip;         /* receiving-ip */
    const char         *reason;     /* failure-reason-code (optional) */
};

const char *tls_rpt_type_name(enum tls_rpt_type t);

/* ---- recording (the worker's hot path) ---- */

void    tls_rpt_enable(int on);          /* tlsrpt.enabled */
int     tls_rpt_enabled(void);
/* Count one session's outcome on the current UTC day. */
void    tls_rpt_record(const struct tls_rpt_event *ev);
/* The same for a given day (tests; the clock is read once per call in
 * tls_rpt_record()). */
void    tls_rpt_record_day(const struct tls_rpt_event *ev, uint32_t day);
/* Hand every policy with counts to emit (msg, n: its block); a policy
 * emit() took (returned 0) is removed,
 * the others kept for the next call.  Stops at the first refusal.
 * Returns the number emitted. */
typedef int tls_rpt_emit_fn(const char *msg, size_t n, void *arg);
size_t  tls_rpt_export(tls_rpt_emit_fn *emit, void *arg);
/* Forget everything recorded (tests). */
void    tls_rpt_reset(void);

/* ---- tables (the process table above is one; the master has its own) */

struct tls_rpt_tab;
struct buf;

struct tls_rpt_tab *tls_rpt_tab_new(void);
void    tls_rpt_tab_free(struct tls_rpt_tab *t);          /* NULL ok */
void    tls_rpt_tab_add(struct tls_rpt_tab *t, uint32_t day,
            const struct tls_rpt_event *ev, uint64_t n);
size_t  tls_rpt_tab_count(const struct tls_rpt_tab *t);   /* policies */
size_t  tls_rpt_tab_bytes(const struct tls_rpt_tab *t);   /* what they hold */
uint64_t tls_rpt_tab_dropped(const struct tls_rpt_tab *t);
/* Merge the policy blocks of text[0..n) (wire form).  0, or -1 with err
 * (nothing merged then). */
int     tls_rpt_tab_merge(struct tls_rpt_tab *t, const char *text, size_t n,
            char *err, size_t errsz);
/* The same, for the days lo..hi only.  skipped NULL: a policy of another
 * day fails the whole text (a worker's message); else such policies are
 * left out and counted in *skipped (the state file read back). */
int     tls_rpt_tab_merge_days(struct tls_rpt_tab *t, const char *text,
            size_t n, uint32_t lo, uint32_t hi, size_t *skipped,
            char *err, size_t errsz);
/* The one domain all of t's policies are for, into out: 0, or -1 when t
 * is empty or holds policies of more than one domain. */
int     tls_rpt_tab_domain(const struct tls_rpt_tab *t, char *out,
            size_t outsz);
/* Every policy as blocks (the state file), ordered. */
void    tls_rpt_tab_dump(const struct tls_rpt_tab *t, struct buf *out);
/* For mtactl tls report: "domain D day=YYYY-MM-DD type=sts success=N
 * failure=N" per policy (domain NULL: all), with its policy strings and
 * failure details indented under it; network text escaped. */
void    tls_rpt_tab_text(const struct tls_rpt_tab *t, const char *domain,
            struct buf *out);
/* Take out every (day, domain) whose day <= max_day: for each, emit()
 * gets the blocks of that domain's policies (one wire body); the group
 * is removed when emit() returns 0.  Returns the groups emitted. */
typedef int tls_rpt_group_fn(uint32_t day, const char *domain,
            const char *blocks, size_t n, void *arg);
size_t  tls_rpt_tab_take(struct tls_rpt_tab *t, uint32_t max_day,
            tls_rpt_group_fn *emit, void *arg);
/* Days: UTC day number of a wall-clock second, and "YYYY-MM-DD". */
uint32_t tls_rpt_day(uint64_t unix_s);
void    tls_rpt_day_str(uint32_t day, char *out, size_t outsz);

/* One connection attempt's TLS outcome, from the outbound client
 * (tlsrpt_outcome.c): failure NULL or "" for success, else an RFC 8460
 * result type; ip the MX host's address; reason (optional) a
 * failure-reason-code.  Nothing when TLS-RPT is off. */
struct tls_req;
void    tls_rpt_outcome(const struct tls_req *r, const char *failure,
            const char *ip, const char *reason);

/* ---- the report (tlsrpt_report.c) ---- */

#define TLS_RPT_RUA_MAX 8

/* _smtp._tls TXT records (RFC 8460 3): exactly one starting with
 * "v=TLSRPTv1"; its rua= mailto: addresses (percent-decoded, without
 * "?..."), https: URIs counted in *nhttps and left out.  0 with *n >= 0,
 * or -1 with err: no record, several, no rua, no usable address. */
int     tls_rpt_rua_parse(const char *const *txt, size_t ntxt,
            char rua[][256], size_t *n, size_t *nhttps,
            char *err, size_t errsz);

struct tls_rpt_info {
    const char *organization;   /* organization-name */
    const char *contact;        /* contact-info */
    const char *submitter;      /* TLS-Report-Submitter: our host name */
    const char *sender;         /* From: */
    const char *domain;         /* the policy domain reported on */
    uint64_t    start_s, end_s; /* date-range */
    uint64_t    now_ms;         /* Date: */
    const char *report_id;      /* report-id, Message-ID's left part */
    const char *const *rua;     /* To: */
    size_t      nrua;
};

/* The RFC 8460 4 JSON of the policies of t whose domain is in->domain. */
void    tls_rpt_json(const struct tls_rpt_tab *t, const struct tls_rpt_info *in,
            struct buf *out);
/* gzip (RFC 1952) of p[0..n) appended to out.  0 or -1 (zlib failed). */
int     tls_rpt_gzip(const void *p, size_t n, struct buf *out);
/* The whole mail (RFC 8460 5.3): headers, multipart/report;
 * report-type="tlsrpt", a text part, and the .json.gz as
 * application/tlsrpt+gzip in base64; "TLS-Required: No" (RFC 8689), as
 * reports must go out despite TLS failures.  0 or -1 (zlib failed). */
int     tls_rpt_mail(const struct tls_rpt_tab *t, const struct tls_rpt_info *in,
            struct buf *out);

#endif /* MTAD_TLSPOL_H */
