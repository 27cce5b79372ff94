/*
 * sts.h - MTA-STS (RFC 8461) for delivery: the policy of a recipient
 * domain, looked up, fetched over HTTPS and cached inside the worker's
 * event loop.  Internal to delivery/ (resolve.c asks, mta_session.c
 * enforces through struct tls_req); the text parsers are sts/sts.h.
 *
 * HOW       stsd_get(domain): the `_mta-sts.<domain>` TXT record through
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
 * CONTRACT  One struct stsd per worker, on the worker's struct dns.
 *           stsd_get()'s callback runs exactly once, always from the loop
 *           (never inside stsd_get()), unless stsd_cancel() came first.
 *           The policy passed to it (NULL: none in force) is valid only
 *           during the call.  At most STSD_CACHE_MAX domains are kept; the
 *           least recently used idle one goes first.
 * FAILURE   stsd_new() returns NULL with a reason (libcurl unusable); the
 *           caller then delivers without MTA-STS and says so once.  A
 *           failed fetch is logged (domain, reason), once per attempt.
 */
#ifndef MTAD_DELIVERY_STS_H
#define MTAD_DELIVERY_STS_H

#include <stddef.h>
#include <stdint.h>

#include "sts/sts.h"

struct ev_loop;
struct dns;
struct stsd;
struct stsd_req;

#define STSD_CACHE_MAX 10000

struct stsd_options {
    const char *ca_file;            /* PEM CA bundle, read into memory by
                                       stsd_new(); NULL: the system's */
    unsigned    port;               /* 443 (tests: another) */
    uint64_t    fetch_timeout_ms;   /* the whole HTTPS fetch */
};

/* The outcome for one domain: pol NULL when no policy is in force; why
 * says what happened ("cached id=...", "fetched id=...", "no TXT
 * record", "fetch failed: ..."), for the log. */
typedef void stsd_fn(const struct sts_policy *pol, const char *why,
            void *arg);

struct stsd *stsd_new(struct ev_loop *loop, struct dns *dns,
            const struct stsd_options *o, char *why, size_t whysz);
void    stsd_free(struct stsd *s);         /* cancels all; NULL ok */
/* 0, or -1 when domain cannot be a policy domain (too long, a literal):
 * then no callback. */
int     stsd_get(struct stsd *s, const char *domain, stsd_fn *fn, void *arg,
            struct stsd_req **reqp);
void    stsd_cancel(struct stsd_req *r);

/*
 * Enforcement (RFC 8461 4.1, 5): p applied to the hops of its domain.
 * enforce: only the hops whose MX name matches a pattern stay, each
 *   marked to need STARTTLS with a certificate that verifies against
 *   tls.ca_file for that name; when none stays, -1 and reply is the
 *   deferral ("451 4.7.5 ...").
 * testing: every hop stays; the ones that do not match are logged (and
 *   counted for TLS-RPT), delivery goes on.
 * none: nothing changes.  Returns 0 (or -1 as above).
 */
struct mta_hop;
int     stsd_hops(const struct sts_policy *p, const char *domain,
            struct mta_hop *hop, size_t *n, char *reply, size_t replysz);

/* ---- pure parts, for the unit test ---- */

enum stsd_txt { STSD_TXT_ID = 0, STSD_TXT_NONE, STSD_TXT_TEMPFAIL };
enum stsd_action { STSD_USE_CACHED = 0, STSD_FETCH, STSD_NO_POLICY };

/*
 * What to do after the TXT lookup: have/cached_id/expires_ms describe the
 * cached policy (have 0: none), txt the lookup's outcome with its id.
 */
enum stsd_action stsd_decide(int have, const char *cached_id,
            uint64_t expires_ms, uint64_t now_ms, enum stsd_txt txt,
            const char *txt_id);
/* The id of the one v=STSv1 record among n joined TXT strings (RFC 8461
 * 3.1: other records discarded; none or more than one valid -> no
 * policy): STSD_TXT_ID with id filled, or STSD_TXT_NONE with why. */
enum stsd_txt stsd_txt_pick(const char *const *txt, const size_t *len,
            size_t n, char *id, char *why, size_t whysz);
/* 1 when a Content-Type value is text/plain (parameters allowed). */
int     stsd_content_type_ok(const char *ct);

#endif /* MTAD_DELIVERY_STS_H */
