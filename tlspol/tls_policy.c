/*
 * tls_policy.c - the pure part of outbound TLS: level names, what a level
 * demands, the decisions after EHLO and after the handshake, the reuse
 * rule, and the log text of an outcome.  No OpenSSL, no I/O: the unit
 * test (tests/unit/test_tls_policy.c) covers every branch.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/util.h"
#include "router/router.h"
#include "tlspol/tlspol.h"

/* The level words live with the table that stores them (router.h); the
 * enum follows their order. */
_Static_assert(TLS_NONE == 0 && TLS_MAY == 1 && TLS_ENCRYPT == 2 &&
    TLS_VERIFY == 3 && TLS_DANE == 4 && TLS_DANE_ONLY == 5,
    "enum tls_level follows router_tls_level()");

static const char *const tls_auth_names[] = { "none", "ca", "dane", "sts" };


const char *
tls_level_name(enum tls_level l)
{
    return router_tls_level_name((int)l);
}


int
tls_level_parse(const char *s, enum tls_level *out)
{
    int l = router_tls_level(s);

    if (l < 0)
        return -1;
    *out = (enum tls_level)l;
    return 0;
}


const char *
tls_auth_name(enum tls_auth a)
{
    return (unsigned)a < sizeof(tls_auth_names) / sizeof(tls_auth_names[0]) ?
        tls_auth_names[a] : "none";
}


size_t
tls_outcome_format(const struct tls_outcome *o, char *out, size_t outsz)
{
    int n;

    if (outsz == 0)
        return 0;
    if (!o->used)
        n = snprintf(out, outsz, "tls=none%s%s", o->failure[0] ?
            " tls_failure=" : "", o->failure);
    else
        n = snprintf(out, outsz, "tls=%s cipher=%s verify=%s%s%s",
            o->version, o->cipher, tls_auth_name(o->auth),
            o->failure[0] ? " tls_failure=" : "", o->failure);
    if (n < 0)
        n = 0;
    return (size_t)n < outsz ? (size_t)n : outsz - 1;
}


int
tls_req_same(const struct tls_req *a, const struct tls_req *b)
{
    return a->level == b->level && a->sts_enforce == b->sts_enforce &&
        a->sts_testing == b->sts_testing &&
        (a->tlsa == NULL) == (b->tlsa == NULL) &&
        strcasecmp(a->verify_name, b->verify_name) == 0;
}


/* tls_req_dane - DANE applies: the host has usable TLSA and the level
 * asks for DANE (RFC 7672 2.2). */
static int
tls_req_dane(const struct tls_req *r)
{
    return (r->level == TLS_DANE || r->level == TLS_DANE_ONLY) &&
        r->tlsa != NULL;
}


int
tls_req_mandatory(const struct tls_req *r)
{
    return r->level == TLS_ENCRYPT || r->level == TLS_VERIFY ||
        r->level == TLS_DANE_ONLY || tls_req_dane(r) || r->sts_enforce;
}


int
tls_req_authenticated(const struct tls_req *r)
{
    return r->level == TLS_VERIFY || r->level == TLS_DANE_ONLY ||
        tls_req_dane(r) || r->sts_enforce;
}


enum tls_step
tls_decide_ehlo(const struct tls_req *r, int offered, int plain_retry)
{
    if (r->level == TLS_NONE && !r->sts_enforce)
        return TLS_GO_PLAIN;
    /* dane-only without usable TLSA: nothing can satisfy it (the DANE
     * part replaces this when it looks the records up) */
    if (r->level == TLS_DANE_ONLY && r->tlsa == NULL)
        return TLS_DEFER;
    if (tls_req_mandatory(r))
        return offered ? TLS_GO_STARTTLS : TLS_DEFER;
    /* may, or dane without TLSA: opportunistic */
    if (plain_retry || !offered)
        return TLS_GO_PLAIN;
    return TLS_GO_STARTTLS;
}


enum tls_step
tls_decide_handshake(const struct tls_req *r, int ok,
    const struct tls_outcome *o)
{
    if (!ok)
        return tls_req_mandatory(r) ? TLS_DEFER : TLS_RETRY_PLAIN;
    if (tls_req_authenticated(r) && o->failure[0] != '\0')
        return TLS_DEFER;
    return TLS_GO_ON;
}


void
tls_defer_reason(const struct tls_req *r, const char *host,
    const char *detail, char *out, size_t outsz)
{
    const char *what = tls_req_dane(r) || r->level == TLS_DANE_ONLY ?
        "DANE-verified TLS" : r->sts_enforce ? "MTA-STS verified TLS" :
        r->level == TLS_VERIFY ? "verified TLS" : "TLS";

    /* 4.7.4: the security feature is not supported by the peer (RFC 3463
     * X.7.4 "Security features not supported"); 4.7.5 for a failure of
     * the cryptography (a handshake or a certificate check) */
    snprintf(out, outsz, "451 %s %s is required (tls %s) for host %s, but "
        "%s", detail != NULL && strcmp(detail, TLS_FAIL_STARTTLS) == 0 ?
        "4.7.4" : "4.7.5", what, tls_level_name(r->level), host,
        detail != NULL && strcmp(detail, TLS_FAIL_STARTTLS) == 0 ?
        "STARTTLS was not offered" : detail != NULL ? detail : "it failed");
}
