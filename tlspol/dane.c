/*
 * dane.c - DANE for SMTP (RFC 7672): TLSA usability, the per-host TLSA
 * lookups of one transaction (with RFC 7672 2.2.3's CNAME order), and the
 * OpenSSL glue (SSL_dane_enable, SSL_dane_tlsa_add,
 * SSL_get0_dane_authority).
 *
 * PURPOSE   resolve.c, once the MX answer is back and secure, asks here for
 *           the TLSA records of each secure MX host (tls_dane_lookup_*), and
 *           turns each host's state into its hops' TLS requirement
 *           (tls_dane_decide).  The TLS client prepares the SSL with the usable
 *           records and asks tls_dane_ssl_verdict() after the handshake.
 * CONTRACT  See tlspol.h.  OpenSSL does the matching and the chain (it
 *           implements RFC 7671: DANE-EE ignores names and dates,
 *           DANE-TA builds the chain to the matched trust anchor); we
 *           only choose the records and the names, and read the result.
 * FAILURE   Never logs; every failure is a state or a -1 with a reason.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "common/util.h"
#include "tlspol/tlspol.h"


const char *
tls_dane_state_name(enum tls_dane_state s)
{
    switch (s) {
    case TLS_DANE_NONE:     return "none";
    case TLS_DANE_USABLE:   return "usable";
    case TLS_DANE_UNUSABLE: return "unusable";
    case TLS_DANE_TEMPFAIL: return "tempfail";
    }
    return "?";
}

#define TLS_DANE_USAGE_TA    2          /* DANE-TA(2) */
#define TLS_DANE_USAGE_EE    3          /* DANE-EE(3) */
#define TLS_DANE_SEL_CERT    0
#define TLS_DANE_SEL_SPKI    1
#define TLS_DANE_MT_FULL     0
#define TLS_DANE_MT_SHA256   1
#define TLS_DANE_MT_SHA512   2

#define TLS_DANE_MAX_HOSTS 32   /* as many as a txn has hops, and more */


/* tls_dane_full_ok - Full(0) data parses as what the selector names. */
static int
tls_dane_full_ok(uint8_t selector, const unsigned char *p, size_t len)
{
    const unsigned char *q = p;
    int                  ok = 0;

    if (len == 0 || len > 65535)
        return 0;
    if (selector == TLS_DANE_SEL_CERT) {
        X509 *x = d2i_X509(NULL, &q, (long)len);

        ok = x != NULL && q == p + len;
        X509_free(x);
    } else {
        EVP_PKEY *k = d2i_PUBKEY(NULL, &q, (long)len);

        ok = k != NULL && q == p + len;
        EVP_PKEY_free(k);
    }
    ERR_clear_error();
    return ok;
}


int
tls_dane_usable(const struct dns_tlsa *t)
{
    if (t->usage != TLS_DANE_USAGE_TA && t->usage != TLS_DANE_USAGE_EE)
        return 0;                   /* PKIX-TA/EE: RFC 7672 3.1.3 */
    if (t->selector != TLS_DANE_SEL_CERT && t->selector != TLS_DANE_SEL_SPKI)
        return 0;
    switch (t->mtype) {
    case TLS_DANE_MT_SHA256:
        return t->len == 32;
    case TLS_DANE_MT_SHA512:
        return t->len == 64;
    case TLS_DANE_MT_FULL:
        return tls_dane_full_ok(t->selector, t->data, t->len);
    default:
        return 0;
    }
}


enum tls_dane_state
tls_dane_classify(const struct dns_rrset *set, struct dns_rrset **usable)
{
    struct dns_rrset *u;
    size_t            i;

    *usable = NULL;
    if (set == NULL)
        return TLS_DANE_NONE;
    if (set->status == DNS_TEMPFAIL)
        return TLS_DANE_TEMPFAIL;
    if (!set->secure || set->status != DNS_OK || set->n == 0)
        return TLS_DANE_NONE;           /* insecure, or denied: not DANE */
    u = xcalloc(1, sizeof(*u));
    u->status = DNS_OK;
    u->secure = 1;
    u->ttl = set->ttl;
    util_strlcpy(u->name, set->name, sizeof(u->name));
    u->rr = xcalloc(set->n, sizeof(*u->rr));
    for (i = 0; i < set->n; i++) {
        struct dns_tlsa t;

        if (dns_tlsa_parse(&set->rr[i], &t) != 0 || !tls_dane_usable(&t))
            continue;
        u->rr[u->n] = set->rr[i];
        u->rr[u->n].rdata = xmalloc(set->rr[i].len);
        memcpy(u->rr[u->n].rdata, set->rr[i].rdata, set->rr[i].len);
        u->n++;
    }
    if (u->n == 0) {
        dns_rrset_free(u);
        return TLS_DANE_UNUSABLE;
    }
    *usable = u;
    return TLS_DANE_USABLE;
}


int
tls_dane_base_domain(const char *tlsa_name, char *out, size_t outsz)
{
    const char *p = tlsa_name;

    if (p[0] != '_')
        return -1;
    p++;
    while (*p >= '0' && *p <= '9')
        p++;
    if (p == tlsa_name + 1 || strncasecmp(p, "._tcp.", 6) != 0 ||
        p[6] == '\0')
        return -1;
    util_strlcpy(out, p + 6, outsz);
    return 0;
}


enum tls_dane_action
tls_dane_decide(int dane_only, enum tls_dane_state st)
{
    switch (st) {
    case TLS_DANE_USABLE:
        return TLS_DANE_ACT_AUTH;
    case TLS_DANE_UNUSABLE:
        return dane_only ? TLS_DANE_ACT_FALLBACK : TLS_DANE_ACT_ENCRYPT;
    case TLS_DANE_TEMPFAIL:
        return TLS_DANE_ACT_SKIP;
    case TLS_DANE_NONE:
    default:
        return TLS_DANE_ACT_FALLBACK;
    }
}


int
tls_dane_refine(struct tls_req *r, const char *host,
    const struct tls_dane_host *dh, char *reply, size_t replysz,
    const char **failure)
{
    int only = r->level == TLS_DANE_ONLY;

    *failure = "";
    reply[0] = '\0';
    if (r->level != TLS_DANE && !only)
        return 0;
    switch (tls_dane_decide(only, dh != NULL ? dh->state : TLS_DANE_NONE)) {
    case TLS_DANE_ACT_AUTH:
        r->tlsa = dh->usable;
        return 0;
    case TLS_DANE_ACT_ENCRYPT:
        r->level = TLS_ENCRYPT;
        return 0;
    case TLS_DANE_ACT_FALLBACK:
        if (!only) {
            r->level = TLS_MAY;
            return 0;
        }
        snprintf(reply, replysz, "451 4.7.5 TLS policy dane-only: no usable "
            "TLSA record for %.200s (none DNSSEC-secure)", host);
        *failure = TLS_FAIL_DANE_REQUIRED;
        return -1;
    case TLS_DANE_ACT_SKIP:
    default:
        snprintf(reply, replysz, "451 4.7.5 %.200s: %.200s", host,
            dh != NULL ? dh->why : "TLSA lookup failed");
        *failure = "dnssec-invalid";
        return -1;
    }
}


/* ---- lookups ---- */

struct tls_dane_q {
    struct tls_dane_lookup *l;
    struct tls_dane_host    h;
    char                target[DNS_NAME_MAX]; /* CNAME-expanded, or "" */
    struct dns_req     *req;        /* while a lookup runs */
    int                 at_target;  /* the running lookup is at target */
};

struct tls_dane_lookup {
    struct dns     *dns;
    tls_dane_done_fn   *fn;
    void           *arg;
    size_t          n, left;
    struct tls_dane_q   q[TLS_DANE_MAX_HOSTS];
};


struct tls_dane_lookup *
tls_dane_lookup_new(struct dns *d, tls_dane_done_fn *fn, void *arg)
{
    struct tls_dane_lookup *l = xcalloc(1, sizeof(*l));

    l->dns = d;
    l->fn = fn;
    l->arg = arg;
    return l;
}


void
tls_dane_lookup_add(struct tls_dane_lookup *l, const struct dns_host *h,
    unsigned port)
{
    struct tls_dane_q *q;
    size_t         i;

    for (i = 0; i < l->n; i++)
        if (l->q[i].h.port == port && strcasecmp(l->q[i].h.name, h->name) == 0)
            return;
    if (l->n == TLS_DANE_MAX_HOSTS)
        return;                     /* beyond the hops a txn can have */
    q = &l->q[l->n++];
    q->l = l;
    util_strlcpy(q->h.name, h->name, sizeof(q->h.name));
    q->h.port = port;
    q->h.state = TLS_DANE_NONE;
    if (h->target[0] != '\0' && strcasecmp(h->target, h->name) != 0)
        util_strlcpy(q->target, h->target, sizeof(q->target));
}


static void tls_dane_q_done(struct dns_rrset *set, void *arg);


/* tls_dane_q_ask - start the TLSA lookup of q at name; -1 when it could not
 * start (then q is settled as a temporary failure). */
static int
tls_dane_q_ask(struct tls_dane_q *q, const char *name)
{
    int rc = dns_tlsa(q->l->dns, name, q->h.port, tls_dane_q_done, q, &q->req);

    if (rc == 0)
        return 0;
    q->req = NULL;
    q->h.state = TLS_DANE_TEMPFAIL;
    snprintf(q->h.why, sizeof(q->h.why), "TLSA lookup for _%u._tcp.%.200s "
        "could not start (%s)", q->h.port, name, dns_strerror(rc));
    return -1;
}


/* tls_dane_q_done - one TLSA answer: settle the host, or after nothing at the
 * CNAME-expanded name ask again at the original name (RFC 7672 2.2.3). */
static void
tls_dane_q_done(struct dns_rrset *set, void *arg)
{
    struct tls_dane_q      *q = arg;
    struct tls_dane_lookup *l = q->l;
    enum tls_dane_state     st;

    q->req = NULL;
    st = tls_dane_classify(set, &q->h.usable);
    if (st == TLS_DANE_TEMPFAIL)
        snprintf(q->h.why, sizeof(q->h.why), "TLSA lookup failed: %.200s",
            set->why);
    dns_rrset_free(set);
    q->h.state = st;
    if (st == TLS_DANE_NONE && q->at_target) {
        q->at_target = 0;
        if (tls_dane_q_ask(q, q->h.name) == 0)
            return;
    }
    if (--l->left == 0)
        l->fn(l->arg);
}


int
tls_dane_lookup_start(struct tls_dane_lookup *l)
{
    size_t i;

    l->left = 1;                    /* no callback before all started */
    for (i = 0; i < l->n; i++) {
        struct tls_dane_q *q = &l->q[i];

        q->at_target = q->target[0] != '\0';
        if (tls_dane_q_ask(q, q->at_target ? q->target : q->h.name) == 0)
            l->left++;
    }
    return --l->left > 0;
}


const struct tls_dane_host *
tls_dane_lookup_find(const struct tls_dane_lookup *l, const char *name,
    unsigned port)
{
    size_t i;

    if (l == NULL)
        return NULL;
    for (i = 0; i < l->n; i++)
        if (l->q[i].h.port == port && strcasecmp(l->q[i].h.name, name) == 0)
            return &l->q[i].h;
    return NULL;
}


void
tls_dane_lookup_free(struct tls_dane_lookup *l)
{
    size_t i;

    if (l == NULL)
        return;
    for (i = 0; i < l->n; i++) {
        if (l->q[i].req != NULL)
            dns_cancel(l->q[i].req);
        dns_rrset_free(l->q[i].h.usable);
    }
    free(l);
}


/* ---- OpenSSL ---- */

/* tls_dane_ssl_err - OpenSSL's last error (or what) into err. */
static void
tls_dane_ssl_err(const char *what, char *err, size_t errsz)
{
    unsigned long e = ERR_get_error();
    char          buf[256];

    if (e != 0) {
        ERR_error_string_n(e, buf, sizeof(buf));
        snprintf(err, errsz, "%s: %s", what, buf);
    } else {
        snprintf(err, errsz, "%s", what);
    }
    ERR_clear_error();
}


int
tls_dane_ctx_enable(SSL_CTX *ctx, char *err, size_t errsz)
{
    if (SSL_CTX_dane_enable(ctx) <= 0) {
        tls_dane_ssl_err("SSL_CTX_dane_enable", err, errsz);
        return -1;
    }
    return 0;
}


/* tls_dane_add_name - one more reference name, unless empty or known. */
static int
tls_dane_add_name(SSL *ssl, const char *name, const char *const *known,
    size_t nknown)
{
    size_t i;

    if (name == NULL || name[0] == '\0')
        return 0;
    for (i = 0; i < nknown; i++)
        if (known[i] != NULL && strcasecmp(known[i], name) == 0)
            return 0;
    return SSL_add1_host(ssl, name) == 1 ? 0 : -1;
}


int
tls_dane_ssl_prepare(SSL *ssl, const struct dns_rrset *tlsa, const char *mxname,
    const char *nexthop, char *err, size_t errsz)
{
    char        base[DNS_NAME_MAX];
    const char *known[2];
    size_t      i, added = 0;

    if (tlsa == NULL || tlsa->n == 0) {
        snprintf(err, errsz, "no TLSA records");
        return -1;
    }
    if (tls_dane_base_domain(tlsa->name, base, sizeof(base)) != 0)
        util_strlcpy(base, mxname != NULL ? mxname : "", sizeof(base));
    /* the base domain is the first reference name, and the SNI (RFC 7672
     * 8.1: it differs from the MX host name when that is a CNAME) */
    if (base[0] != '\0' && SSL_set_tlsext_host_name(ssl, base) != 1) {
        tls_dane_ssl_err("SNI", err, errsz);
        return -1;
    }
    if (SSL_dane_enable(ssl, base) <= 0) {
        tls_dane_ssl_err("SSL_dane_enable", err, errsz);
        return -1;
    }
    known[0] = base;
    known[1] = mxname;
    if (tls_dane_add_name(ssl, mxname, known, 1) != 0 ||
        tls_dane_add_name(ssl, nexthop, known, 2) != 0) {
        tls_dane_ssl_err("SSL_add1_host", err, errsz);
        return -1;
    }
    SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    /* RFC 7672 3.2.1: a DANE-EE match binds the key, not a name */
    SSL_dane_set_flags(ssl, DANE_FLAG_NO_DANE_EE_NAMECHECKS);
    for (i = 0; i < tlsa->n; i++) {
        struct dns_tlsa t;
        int             rc;

        if (dns_tlsa_parse(&tlsa->rr[i], &t) != 0 || !tls_dane_usable(&t))
            continue;
        rc = SSL_dane_tlsa_add(ssl, t.usage, t.selector, t.mtype,
            t.data, t.len);
        if (rc < 0) {
            tls_dane_ssl_err("SSL_dane_tlsa_add", err, errsz);
            return -1;
        }
        if (rc > 0)
            added++;
    }
    ERR_clear_error();              /* rc 0 (unusable) leaves errors */
    if (added == 0) {
        snprintf(err, errsz, "no TLSA record of %.200s is usable",
            tlsa->name);
        return -1;
    }
    /* the verdict comes after the handshake, from the verify result */
    SSL_set_verify(ssl, SSL_VERIFY_NONE, NULL);
    return 0;
}


int
tls_dane_ssl_verdict(SSL *ssl, char *failure, size_t fsz, char *detail,
    size_t dsz)
{
    long        vr = SSL_get_verify_result(ssl);
    const char *type;

    failure[0] = '\0';
    detail[0] = '\0';
    if (SSL_session_reused(ssl)) {
        /* OpenSSL does not match TLSA on a resumed session */
        util_strlcpy(failure, "validation-failure", fsz);
        util_strlcpy(detail, "resumed session: no DANE check", dsz);
        return -1;
    }
    if (vr == X509_V_OK && SSL_get0_dane_authority(ssl, NULL, NULL) >= 0)
        return 0;
    switch (vr) {
    case X509_V_OK:                 /* verified, but not through DANE */
    case X509_V_ERR_DANE_NO_MATCH:
        type = "tlsa-invalid";
        break;
    case X509_V_ERR_HOSTNAME_MISMATCH:
        type = "certificate-host-mismatch";
        break;
    case X509_V_ERR_CERT_HAS_EXPIRED:
        type = "certificate-expired";
        break;
    default:
        type = "validation-failure";
        break;
    }
    util_strlcpy(failure, type, fsz);
    snprintf(detail, dsz, "%s", vr == X509_V_OK ? "no TLSA record matched" :
        X509_verify_cert_error_string(vr));
    return -1;
}
