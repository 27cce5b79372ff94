/*
 * test_dane.c - tlspol/dane.c: which TLSA records are usable for SMTP
 * (RFC 7672 3.1), what a host's TLSA answer makes of its hops, and the
 * OpenSSL glue against real handshakes in memory: certificates and TLSA
 * records are made here (a CA and leaves signed by it), a server SSL and
 * a client SSL prepared by tls_dane_ssl_prepare() talk through a BIO pair,
 * and tls_dane_ssl_verdict() must say match or name the RFC 8460 failure.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "common/util.h"
#include "tlspol/tlspol.h"
#include "smtp/smtp.h"

/* ---- usability ---- */

static const struct {
    const char *name;
    uint8_t     usage, selector, mtype;
    size_t      len;
    int         want;
} usable_cases[] = {
    { "3 1 1 sha256",            3, 1, 1, 32, 1 },
    { "3 0 1 sha256",            3, 0, 1, 32, 1 },
    { "2 1 1 sha256",            2, 1, 1, 32, 1 },
    { "2 0 2 sha512",            2, 0, 2, 64, 1 },
    { "3 1 2 sha512",            3, 1, 2, 64, 1 },
    { "0 0 1 PKIX-TA",           0, 0, 1, 32, 0 },
    { "1 1 1 PKIX-EE",           1, 1, 1, 32, 0 },
    { "4 1 1 unknown usage",     4, 1, 1, 32, 0 },
    { "3 2 1 unknown selector",  3, 2, 1, 32, 0 },
    { "3 1 3 unknown mtype",     3, 1, 3, 32, 0 },
    { "3 1 1 short digest",      3, 1, 1, 31, 0 },
    { "3 1 1 long digest",       3, 1, 1, 33, 0 },
    { "3 1 2 sha256-long data",  3, 1, 2, 32, 0 },
    { "3 1 0 not DER",           3, 1, 0, 40, 0 },
    { "3 0 0 empty",             3, 0, 0, 0, 0 },
};

Test(dane, usable_records_are_dane_ta_or_ee_with_well_formed_data)
{
    unsigned char data[64];
    size_t        i;

    memset(data, 0xab, sizeof(data));
    for (i = 0; i < sizeof(usable_cases) / sizeof(usable_cases[0]); i++) {
        struct dns_tlsa t = { usable_cases[i].usage, usable_cases[i].selector,
            usable_cases[i].mtype, data, usable_cases[i].len };

        cr_expect_eq(tls_dane_usable(&t), usable_cases[i].want,
            "%s: got %d, want %d", usable_cases[i].name, tls_dane_usable(&t),
            usable_cases[i].want);
    }
}

/* an rrset of TLSA records given as "u s m hexdata;..." */
static struct dns_rrset *
mkset(enum dns_status st, int secure, const char *spec)
{
    struct dns_rrset *s = xcalloc(1, sizeof(*s));
    char             *copy = xstrdup(spec), *save = NULL, *r;

    s->status = st;
    s->secure = secure;
    snprintf(s->name, sizeof(s->name), "_25._tcp.mx.x.test");
    s->rr = xcalloc(8, sizeof(*s->rr));
    for (r = strtok_r(copy, ";", &save); r; r = strtok_r(NULL, ";", &save)) {
        unsigned u, sel, m;
        int      off = 0;
        const char *hex;
        size_t   k, n;
        struct dns_rr *rr = &s->rr[s->n++];

        cr_assert_eq(sscanf(r, "%u %u %u %n", &u, &sel, &m, &off), 3);
        hex = r + off;
        n = strlen(hex) / 2;
        rr->type = DNS_T_TLSA;
        rr->len = 3 + n;
        rr->rdata = xmalloc(rr->len);
        rr->rdata[0] = (unsigned char)u;
        rr->rdata[1] = (unsigned char)sel;
        rr->rdata[2] = (unsigned char)m;
        for (k = 0; k < n; k++) {
            unsigned b;

            sscanf(hex + 2 * k, "%2x", &b);
            rr->rdata[3 + k] = (unsigned char)b;
        }
    }
    free(copy);
    return s;
}

#define H32 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

Test(dane, classify_keeps_only_usable_records_of_a_secure_answer)
{
    struct dns_rrset *s = mkset(DNS_OK, 1, "0 0 1 " H32 ";3 1 1 " H32
        ";1 1 1 " H32 ";2 1 1 " H32 ";3 1 1 00"), *u;

    cr_assert_eq(tls_dane_classify(s, &u), TLS_DANE_USABLE);
    cr_assert_not_null(u);
    cr_assert_eq(u->n, 2, "got %zu usable, want 2", u->n);
    cr_expect_eq(u->rr[0].rdata[0], 3);
    cr_expect_eq(u->rr[1].rdata[0], 2);
    cr_expect_str_eq(u->name, "_25._tcp.mx.x.test");
    cr_expect(u->secure);
    dns_rrset_free(u);
    dns_rrset_free(s);
}

Test(dane, classify_secure_records_none_usable_is_unusable)
{
    struct dns_rrset *s = mkset(DNS_OK, 1, "0 0 1 " H32 ";1 1 1 " H32), *u;

    cr_expect_eq(tls_dane_classify(s, &u), TLS_DANE_UNUSABLE);
    cr_expect_null(u);
    dns_rrset_free(s);
}

Test(dane, classify_insecure_denied_and_failed_answers)
{
    struct dns_rrset *ins = mkset(DNS_OK, 0, "3 1 1 " H32);
    struct dns_rrset *nod = mkset(DNS_NODATA, 1, "");
    struct dns_rrset *nx = mkset(DNS_NXDOMAIN, 1, "");
    struct dns_rrset *tf = mkset(DNS_TEMPFAIL, 0, "");
    struct dns_rrset *u = (void *)1;

    cr_expect_eq(tls_dane_classify(ins, &u), TLS_DANE_NONE, "insecure records");
    cr_expect_null(u);
    cr_expect_eq(tls_dane_classify(nod, &u), TLS_DANE_NONE, "secure NODATA");
    cr_expect_eq(tls_dane_classify(nx, &u), TLS_DANE_NONE, "secure NXDOMAIN");
    cr_expect_eq(tls_dane_classify(tf, &u), TLS_DANE_TEMPFAIL, "SERVFAIL");
    cr_expect_eq(tls_dane_classify(NULL, &u), TLS_DANE_NONE, "no lookup");
    dns_rrset_free(ins);
    dns_rrset_free(nod);
    dns_rrset_free(nx);
    dns_rrset_free(tf);
}

Test(dane, decide_maps_each_state_for_dane_and_dane_only)
{
    cr_expect_eq(tls_dane_decide(0, TLS_DANE_USABLE), TLS_DANE_ACT_AUTH);
    cr_expect_eq(tls_dane_decide(1, TLS_DANE_USABLE), TLS_DANE_ACT_AUTH);
    cr_expect_eq(tls_dane_decide(0, TLS_DANE_UNUSABLE), TLS_DANE_ACT_ENCRYPT);
    cr_expect_eq(tls_dane_decide(1, TLS_DANE_UNUSABLE), TLS_DANE_ACT_FALLBACK);
    cr_expect_eq(tls_dane_decide(0, TLS_DANE_NONE), TLS_DANE_ACT_FALLBACK);
    cr_expect_eq(tls_dane_decide(1, TLS_DANE_NONE), TLS_DANE_ACT_FALLBACK);
    cr_expect_eq(tls_dane_decide(0, TLS_DANE_TEMPFAIL), TLS_DANE_ACT_SKIP);
    cr_expect_eq(tls_dane_decide(1, TLS_DANE_TEMPFAIL), TLS_DANE_ACT_SKIP);
}

/* refine - a hop at level lvl after its host's state st. */
static int
refine(enum tls_level lvl, enum tls_dane_state st, int looked_up,
    struct tls_req *r, char *reply, const char **fail)
{
    static struct dns_rrset usable;
    struct tls_dane_host        dh;

    memset(r, 0, sizeof(*r));
    memset(&dh, 0, sizeof(dh));
    r->level = lvl;
    dh.state = st;
    dh.usable = st == TLS_DANE_USABLE ? &usable : NULL;
    snprintf(dh.why, sizeof(dh.why), "TLSA lookup failed: SERVFAIL");
    return tls_dane_refine(r, "mx.x.test", looked_up ? &dh : NULL, reply,
        SMTP_REPLY_MAX, fail);
}

Test(dane, refine_sets_each_hop_requirement_per_rfc7672)
{
    static const struct {
        const char    *name;
        enum tls_level lvl;
        enum tls_dane_state st;
        int            looked_up;
        int            rc;
        enum tls_level want;
        int            tlsa;
        const char    *fail;
    } c[] = {
        { "dane usable",        TLS_DANE, TLS_DANE_USABLE, 1, 0, TLS_DANE, 1,
          "" },
        { "dane unusable",      TLS_DANE, TLS_DANE_UNUSABLE, 1, 0, TLS_ENCRYPT,
          0, "" },
        { "dane no TLSA",       TLS_DANE, TLS_DANE_NONE, 1, 0, TLS_MAY, 0, "" },
        { "dane insecure MX",   TLS_DANE, TLS_DANE_NONE, 0, 0, TLS_MAY, 0, "" },
        { "dane tempfail",      TLS_DANE, TLS_DANE_TEMPFAIL, 1, -1, TLS_DANE, 0,
          "dnssec-invalid" },
        { "only usable",        TLS_DANE_ONLY, TLS_DANE_USABLE, 1, 0,
          TLS_DANE_ONLY, 1, "" },
        { "only unusable",      TLS_DANE_ONLY, TLS_DANE_UNUSABLE, 1, -1,
          TLS_DANE_ONLY, 0, "dane-required" },
        { "only no TLSA",       TLS_DANE_ONLY, TLS_DANE_NONE, 1, -1,
          TLS_DANE_ONLY, 0, "dane-required" },
        { "only insecure MX",   TLS_DANE_ONLY, TLS_DANE_NONE, 0, -1,
          TLS_DANE_ONLY, 0, "dane-required" },
        { "only tempfail",      TLS_DANE_ONLY, TLS_DANE_TEMPFAIL, 1, -1,
          TLS_DANE_ONLY, 0, "dnssec-invalid" },
        { "verify untouched",   TLS_VERIFY, TLS_DANE_USABLE, 1, 0, TLS_VERIFY,
          0, "" },
        { "may untouched",      TLS_MAY, TLS_DANE_TEMPFAIL, 1, 0, TLS_MAY, 0,
          "" },
    };
    size_t i;

    for (i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        struct tls_req r;
        char           reply[SMTP_REPLY_MAX];
        const char    *fail;
        int            rc = refine(c[i].lvl, c[i].st, c[i].looked_up, &r,
            reply, &fail);

        cr_expect_eq(rc, c[i].rc, "%s: rc got %d, want %d", c[i].name, rc,
            c[i].rc);
        cr_expect_eq(r.level, c[i].want, "%s: level got %d, want %d",
            c[i].name, r.level, c[i].want);
        cr_expect_eq(r.tlsa != NULL, c[i].tlsa, "%s: tlsa", c[i].name);
        cr_expect_str_eq(fail, c[i].fail, "%s: failure got %s, want %s",
            c[i].name, fail, c[i].fail);
        if (rc != 0)
            cr_expect(strncmp(reply, "451 4.7.5 ", 10) == 0 &&
                strstr(reply, "mx.x.test") != NULL, "%s: reply %s",
                c[i].name, reply);
    }
}

Test(dane, base_domain_strips_the_port_and_protocol_labels)
{
    char out[DNS_NAME_MAX];

    cr_assert_eq(tls_dane_base_domain("_25._tcp.mx.x.test", out,
        sizeof(out)), 0);
    cr_expect_str_eq(out, "mx.x.test");
    cr_assert_eq(tls_dane_base_domain("_2525._TCP.a.b", out, sizeof(out)), 0);
    cr_expect_str_eq(out, "a.b");
    cr_expect_eq(tls_dane_base_domain("mx.x.test", out, sizeof(out)), -1);
    cr_expect_eq(tls_dane_base_domain("_._tcp.x", out, sizeof(out)), -1);
    cr_expect_eq(tls_dane_base_domain("_25._udp.x", out, sizeof(out)), -1);
    cr_expect_eq(tls_dane_base_domain("_25._tcp.", out, sizeof(out)), -1);
}

/* ---- the glue, with certificates made here ---- */

struct pki {
    EVP_PKEY *cakey, *key, *otherkey;
    X509     *ca, *leaf, *other;    /* other: a CA-less self-signed one */
};

static X509 *
mkcert(EVP_PKEY *key, EVP_PKEY *signkey, X509 *issuer, const char *cn,
    const char *san, int is_ca, long from_days, long to_days)
{
    X509       *x = X509_new();
    X509_NAME  *n = X509_NAME_new();
    X509V3_CTX  v3;
    X509_EXTENSION *e;
    static long serial = 1;

    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), serial++);
    X509_gmtime_adj(X509_getm_notBefore(x), from_days * 86400);
    X509_gmtime_adj(X509_getm_notAfter(x), to_days * 86400);
    X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC,
        (const unsigned char *)cn, -1, -1, 0);
    X509_set_subject_name(x, n);
    X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : n);
    X509_set_pubkey(x, key);
    X509V3_set_ctx(&v3, issuer ? issuer : x, x, NULL, NULL, 0);
    e = X509V3_EXT_conf_nid(NULL, &v3, NID_basic_constraints,
        is_ca ? "critical,CA:TRUE" : "CA:FALSE");
    X509_add_ext(x, e, -1);
    X509_EXTENSION_free(e);
    if (san != NULL) {
        e = X509V3_EXT_conf_nid(NULL, &v3, NID_subject_alt_name, san);
        X509_add_ext(x, e, -1);
        X509_EXTENSION_free(e);
    }
    cr_assert(X509_sign(x, signkey, EVP_sha256()) > 0);
    X509_NAME_free(n);
    return x;
}

static void
pki_make(struct pki *p, const char *leaf_san, long leaf_to_days)
{
    p->cakey = EVP_EC_gen("P-256");
    p->key = EVP_EC_gen("P-256");
    p->otherkey = EVP_EC_gen("P-256");
    cr_assert(p->cakey && p->key && p->otherkey);
    p->ca = mkcert(p->cakey, p->cakey, NULL, "Test CA", NULL, 1, -1, 30);
    p->leaf = mkcert(p->key, p->cakey, p->ca, "leaf", leaf_san, 0,
        leaf_to_days < 0 ? -10 : -1, leaf_to_days);
    p->other = mkcert(p->otherkey, p->otherkey, NULL, "other",
        "DNS:other.x.test", 0, -1, 30);
}

static void
pki_free(struct pki *p)
{
    X509_free(p->ca);
    X509_free(p->leaf);
    X509_free(p->other);
    EVP_PKEY_free(p->cakey);
    EVP_PKEY_free(p->key);
    EVP_PKEY_free(p->otherkey);
}

/* "u s m hex" of cert x: selector 0 = the DER cert, 1 = its SPKI;
 * mtype 0 = the data itself, 1 = SHA2-256, 2 = SHA2-512. */
static void
record_of(X509 *x, unsigned u, unsigned sel, unsigned m, char *out,
    size_t outsz)
{
    unsigned char *der = NULL, md[EVP_MAX_MD_SIZE];
    const unsigned char *data;
    unsigned int   mdlen = 0;
    int            len;
    size_t         i, o;

    len = sel == 0 ? i2d_X509(x, &der) :
        i2d_PUBKEY(X509_get0_pubkey(x), &der);
    cr_assert(len > 0);
    data = der;
    if (m != 0) {
        cr_assert(EVP_Digest(der, (size_t)len, md, &mdlen,
            m == 1 ? EVP_sha256() : EVP_sha512(), NULL));
        data = md;
        len = (int)mdlen;
    }
    o = (size_t)snprintf(out, outsz, "%u %u %u ", u, sel, m);
    for (i = 0; i < (size_t)len && o + 3 < outsz; i++)
        o += (size_t)snprintf(out + o, outsz - o, "%02x", data[i]);
    OPENSSL_free(der);
}

static char last_sni[256];         /* what the server saw last */
static const char *pre_sni;         /* SNI the caller set before DANE */

/* step - one handshake step of ssl; it may only wait for the peer. */
static void
step(SSL *ssl, int *done, const char *who)
{
    int rc;

    if (*done)
        return;
    rc = SSL_do_handshake(ssl);
    if (rc == 1)
        *done = 1;
    else
        cr_assert_eq(SSL_get_error(ssl, rc), SSL_ERROR_WANT_READ,
            "%s handshake failed", who);
}

/* handshake - server with chain (leaf [+ ca]) vs a client prepared for
 * tlsa; the verdict, failure in failure. */
static int
handshake(X509 *leaf, EVP_PKEY *key, X509 *chain_ca, const char *spec,
    const char *mxname, const char *nexthop, char *failure, size_t fsz)
{
    SSL_CTX          *sctx = SSL_CTX_new(TLS_server_method());
    SSL_CTX          *cctx = SSL_CTX_new(TLS_client_method());
    SSL              *s, *c;
    BIO              *bs, *bc;
    struct dns_rrset *set = mkset(DNS_OK, 1, spec), *u;
    char              err[256], detail[256];
    int               i, cdone = 0, sdone = 0, rc;

    cr_assert(sctx && cctx);
    cr_assert_eq(SSL_CTX_use_certificate(sctx, leaf), 1);
    cr_assert_eq(SSL_CTX_use_PrivateKey(sctx, key), 1);
    if (chain_ca != NULL)
        cr_assert_eq(SSL_CTX_add1_chain_cert(sctx, chain_ca), 1);
    cr_assert_eq(tls_dane_ctx_enable(cctx, err, sizeof(err)), 0, "%s", err);
    s = SSL_new(sctx);
    c = SSL_new(cctx);
    cr_assert(BIO_new_bio_pair(&bs, 0, &bc, 0) == 1);
    SSL_set_bio(s, bs, bs);
    SSL_set_bio(c, bc, bc);
    SSL_set_accept_state(s);
    SSL_set_connect_state(c);
    cr_assert_eq(tls_dane_classify(set, &u), TLS_DANE_USABLE, "spec %s", spec);
    if (pre_sni != NULL)
        cr_assert_eq(SSL_set_tlsext_host_name(c, pre_sni), 1);
    cr_assert_eq(tls_dane_ssl_prepare(c, u, mxname, nexthop, err, sizeof(err)),
        0, "%s", err);
    for (i = 0; i < 100 && !(cdone && sdone); i++) {
        step(c, &cdone, "client");
        step(s, &sdone, "server");
    }
    cr_assert(cdone && sdone, "handshake did not finish");
    snprintf(last_sni, sizeof(last_sni), "%s",
        SSL_get_servername(s, TLSEXT_NAMETYPE_host_name) != NULL ?
        SSL_get_servername(s, TLSEXT_NAMETYPE_host_name) : "");
    rc = tls_dane_ssl_verdict(c, failure, fsz, detail, sizeof(detail));
    cr_expect((rc == 0) == (failure[0] == '\0'), "rc %d failure '%s'", rc,
        failure);
    SSL_free(c);
    SSL_free(s);
    SSL_CTX_free(cctx);
    SSL_CTX_free(sctx);
    dns_rrset_free(set);
    dns_rrset_free(u);
    return rc;
}

/* Handshakes against one record each: whose (leaf, CA, another key),
 * which usage/selector/mtype, what the server sends and is named. */
enum { OF_LEAF, OF_CA, OF_OTHER };

static const struct glue_case {
    const char *name;
    const char *san;                /* the leaf's subjectAltName */
    long        leaf_days;          /* < 0: expired that long ago */
    int         of;                 /* OF_*: the record's certificate */
    unsigned    usage, selector, mtype;
    int         chain_ca;           /* the server sends the CA too */
    int         want;               /* tls_dane_ssl_verdict() */
    const char *fail;               /* the RFC 8460 type when -1 */
} glue_cases[] = {
    { "3 1 1 of the leaf verifies, names unchecked",
      "DNS:somewhere.else.test", 30, OF_LEAF, 3, 1, 1, 0, 0, "" },
    { "3 0 0 (the whole certificate)",
      "DNS:mx.x.test", 30, OF_LEAF, 3, 0, 0, 0, 0, "" },
    { "3 1 2 (SHA2-512)",
      "DNS:mx.x.test", 30, OF_LEAF, 3, 1, 2, 0, 0, "" },
    { "3 1 1 ignores the leaf's dates (RFC 7671 5.1)",
      "DNS:mx.x.test", -1, OF_LEAF, 3, 1, 1, 0, 0, "" },
    { "3 1 1 of another key",
      "DNS:mx.x.test", 30, OF_OTHER, 3, 1, 1, 0, -1, "tlsa-invalid" },
    { "2 1 1 of the CA, leaf named for the MX host",
      "DNS:mx.x.test", 30, OF_CA, 2, 1, 1, 1, 0, "" },
    { "2 1 1 of the CA, leaf named for the next-hop domain",
      "DNS:x.test", 30, OF_CA, 2, 1, 1, 1, 0, "" },
    { "2 0 1 of the CA (the whole CA certificate)",
      "DNS:mx.x.test", 30, OF_CA, 2, 0, 1, 1, 0, "" },
    { "2 1 1 of the CA, leaf for another name",
      "DNS:elsewhere.test", 30, OF_CA, 2, 1, 1, 1, -1,
      "certificate-host-mismatch" },
    { "2 1 1 of the CA, leaf expired",
      "DNS:mx.x.test", -1, OF_CA, 2, 1, 1, 1, -1, "certificate-expired" },
    { "2 1 1 of another CA",
      "DNS:mx.x.test", 30, OF_OTHER, 2, 1, 1, 1, -1, "tlsa-invalid" },
};

Test(dane_glue, each_record_kind_matches_or_names_the_failure)
{
    size_t i;

    for (i = 0; i < sizeof(glue_cases) / sizeof(glue_cases[0]); i++) {
        const struct glue_case *g = &glue_cases[i];
        struct pki p;
        char       rec[4096], fail[64];
        int        rc;

        pki_make(&p, g->san, g->leaf_days);
        record_of(g->of == OF_LEAF ? p.leaf : g->of == OF_CA ? p.ca :
            p.other, g->usage, g->selector, g->mtype, rec, sizeof(rec));
        rc = handshake(p.leaf, p.key, g->chain_ca ? p.ca : NULL, rec,
            "mx.x.test", "x.test", fail, sizeof(fail));
        cr_expect_eq(rc, g->want, "%s: got %d (%s), want %d", g->name, rc,
            fail, g->want);
        cr_expect_str_eq(fail, g->fail, "%s: failure got '%s', want '%s'",
            g->name, fail, g->fail);
        pki_free(&p);
    }
}

Test(dane_glue, sni_is_the_tlsa_base_domain_not_the_cname)
{
    struct pki p;
    char       rec[300], fail[64];

    /* the MX host alias.x.test is a CNAME to mx.x.test, where the TLSA
     * is: the TLS client had named the alias (RFC 7672 8.1) */
    pki_make(&p, "DNS:mx.x.test", 30);
    record_of(p.leaf, 3, 1, 1, rec, sizeof(rec));
    pre_sni = "alias.x.test";
    cr_expect_eq(handshake(p.leaf, p.key, NULL, rec, "alias.x.test",
        "x.test", fail, sizeof(fail)), 0, "failure %s", fail);
    pre_sni = NULL;
    cr_expect_str_eq(last_sni, "mx.x.test");
    pki_free(&p);
}

Test(dane_glue, one_matching_record_among_others_is_enough)
{
    struct pki p;
    char       a[300], b[300], spec[700], fail[64];

    pki_make(&p, "DNS:mx.x.test", 30);
    record_of(p.other, 3, 1, 1, a, sizeof(a));
    record_of(p.leaf, 3, 1, 1, b, sizeof(b));
    snprintf(spec, sizeof(spec), "%s;%s", a, b);
    cr_expect_eq(handshake(p.leaf, p.key, NULL, spec, "mx.x.test", "x.test",
        fail, sizeof(fail)), 0, "failure %s", fail);
    pki_free(&p);
}

Test(dane_glue, prepare_refuses_an_rrset_without_records)
{
    SSL_CTX          *cctx = SSL_CTX_new(TLS_client_method());
    SSL              *c;
    struct dns_rrset  empty;
    char              err[256];

    memset(&empty, 0, sizeof(empty));
    snprintf(empty.name, sizeof(empty.name), "_25._tcp.mx.x.test");
    cr_assert_eq(tls_dane_ctx_enable(cctx, err, sizeof(err)), 0);
    c = SSL_new(cctx);
    cr_expect_eq(tls_dane_ssl_prepare(c, &empty, "mx.x.test", "x.test", err,
        sizeof(err)), -1);
    cr_expect_eq(tls_dane_ssl_prepare(c, NULL, "mx.x.test", "x.test", err,
        sizeof(err)), -1);
    SSL_free(c);
    SSL_CTX_free(cctx);
}
