/*
 * tls_client.c - the OpenSSL side of outbound STARTTLS: the client
 * context (one per worker, built before the sandbox), the per-connection
 * set-up (SNI, the name to check) and the verdict after the handshake.
 *
 * CONTRACT  See tlspol.h.  The chain is always verified (against
 *           tls.ca_file, or the system's bundle) but the handshake never
 *           fails on it (SSL_VERIFY_NONE): the result is read afterwards
 *           and the level decides (tls_decide_handshake()), so that may
 *           and encrypt still deliver to a self-signed peer and the log
 *           says verify=none, while verify defers.  A hop with usable
 *           TLSA records (dane, dane-only) is checked by OpenSSL's DANE
 *           instead (dane.c: records, reference names, SNI = the TLSA
 *           base domain; the verdict from SSL_get0_dane_authority()).
 * SANDBOX   The CA bundle is read whole into the context's X509_STORE
 *           here (a file, never a hashed directory looked up at verify
 *           time): a worker under Landlock reads no file after start.
 * FAILURE   Never logs; reasons go to err.
 */
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "common/net.h"
#include "common/util.h"
#include "tlspol/tlspol.h"


/* tls_client_err - what failed, with OpenSSL's first queued reason. */
static void
tls_client_err(const char *what, char *err, size_t errsz)
{
    char why[256] = "";

    if (ERR_peek_last_error() != 0)
        ERR_error_string_n(ERR_peek_last_error(), why, sizeof(why));
    snprintf(err, errsz, "%s: %s", what, why[0] ? why : "unknown error");
    ERR_clear_error();
}


struct ssl_ctx_st *
tls_client_ctx(const struct tls_client_opts *o, char *err, size_t errsz)
{
    const char *ca = o->ca_file != NULL && o->ca_file[0] != '\0' ?
        o->ca_file : X509_get_default_cert_file();
    SSL_CTX    *ctx;

    ERR_clear_error();
    if ((ctx = SSL_CTX_new(TLS_client_method())) == NULL) {
        tls_client_err("SSL_CTX_new", err, errsz);
        return NULL;
    }
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION
        | SSL_OP_IGNORE_UNEXPECTED_EOF);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
        SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    net_tls_ctx_io(ctx);
    if (tls_dane_ctx_enable(ctx, err, errsz) != 0)   /* RFC 7672 (dane.c) */
        goto fail;
    if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1 ||
        SSL_CTX_set1_groups_list(ctx, NET_TLS_GROUPS) != 1) {
        tls_client_err("TLS versions and groups", err, errsz);
        goto fail;
    }
    if (access(ca, R_OK) != 0 && (o->ca_file == NULL ||
        o->ca_file[0] == '\0')) {
        /* no system bundle (ca-certificates not installed): nothing
         * verifies; verify and sts then defer, may and encrypt work */
        return ctx;
    }
    if (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1) {
        char what[300];

        snprintf(what, sizeof(what), "tls.ca_file %s", ca);
        tls_client_err(what, err, errsz);
        goto fail;
    }
    return ctx;
fail:
    SSL_CTX_free(ctx);
    return NULL;
}


/* tls_client_dane - the peer is checked against TLSA records (tlspol.h). */
static int
tls_client_dane(const struct tls_req *r)
{
    return (r->level == TLS_DANE || r->level == TLS_DANE_ONLY) &&
        r->tlsa != NULL;
}


/* tls_client_is_ip - a name that is an address literal (no SNI then:
 * RFC 6066 3 forbids literal addresses in server_name). */
static int
tls_client_is_ip(const char *name)
{
    unsigned char buf[sizeof(struct in6_addr)];

    return inet_pton(AF_INET, name, buf) == 1 ||
        inet_pton(AF_INET6, name, buf) == 1;
}


int
tls_client_prepare(struct ssl_st *ssl, const struct tls_req *r, char *err,
    size_t errsz)
{
    X509_VERIFY_PARAM *vp = SSL_get0_param(ssl);
    const char        *name = r->verify_name;
    size_t             n = strlen(name);
    char               host[TLS_NAME_MAX];

    ERR_clear_error();
    /* "mx.example.org." is mx.example.org in a certificate */
    util_strlcpy(host, name, sizeof(host));
    if (n > 0 && host[n - 1] == '.')
        host[n - 1] = '\0';
    if (host[0] == '\0')
        return 0;                   /* nothing to name or check */
    if (tls_client_is_ip(host)) {
        if (X509_VERIFY_PARAM_set1_ip_asc(vp, host) != 1) {
            tls_client_err("certificate address check", err, errsz);
            return -1;
        }
        return 0;
    }
    if (SSL_set_tlsext_host_name(ssl, host) != 1) {
        tls_client_err("SNI", err, errsz);
        return -1;
    }
    if (tls_client_dane(r))         /* names and records: RFC 7672 3.2 */
        return tls_dane_ssl_prepare(ssl, r->tlsa, host, r->policy_domain, err,
            errsz);
    /* RFC 6125 6.4.3: a wildcard only as the whole left-most label */
    X509_VERIFY_PARAM_set_hostflags(vp, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    if (X509_VERIFY_PARAM_set1_host(vp, host, 0) != 1) {
        tls_client_err("certificate name check", err, errsz);
        return -1;
    }
    return 0;
}


/* tls_client_failure - the RFC 8460 result type of a verify error. */
static const char *
tls_client_failure(long v)
{
    switch (v) {
    case X509_V_ERR_HOSTNAME_MISMATCH:
    case X509_V_ERR_IP_ADDRESS_MISMATCH:
        return TLS_FAIL_HOST_MISMATCH;
    case X509_V_ERR_CERT_HAS_EXPIRED:
    case X509_V_ERR_CERT_NOT_YET_VALID:
        return TLS_FAIL_EXPIRED;
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
    case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
    case X509_V_ERR_CERT_UNTRUSTED:
        return TLS_FAIL_NOT_TRUSTED;
    default:
        return TLS_FAIL_VALIDATION;
    }
}


int
tls_client_verdict(struct ssl_st *ssl, const struct tls_req *r,
    struct tls_outcome *o)
{
    const SSL_CIPHER *c = SSL_get_current_cipher(ssl);
    X509             *peer = SSL_get0_peer_certificate(ssl);
    long              v = SSL_get_verify_result(ssl);

    o->used = 1;
    o->resumed = SSL_session_reused(ssl) == 1;
    util_strlcpy(o->version, SSL_get_version(ssl), sizeof(o->version));
    util_strlcpy(o->cipher, c != NULL ? SSL_CIPHER_get_name(c) : "none",
        sizeof(o->cipher));
    o->failure[0] = '\0';
    o->auth = TLS_AUTH_NONE;
    if (tls_client_dane(r)) {
        char detail[256];

        if (tls_dane_ssl_verdict(ssl, o->failure, sizeof(o->failure), detail,
            sizeof(detail)) != 0)
            return -1;
        o->auth = TLS_AUTH_DANE;
        return 0;
    }
    if (peer != NULL && v == X509_V_OK) {
        o->auth = r->sts_enforce ? TLS_AUTH_STS : TLS_AUTH_CA;
        return 0;
    }
    if (!tls_req_authenticated(r)) {
        /* MTA-STS testing (RFC 8461 5): what enforce would have refused
         * is recorded (log, TLS-RPT), the delivery goes on */
        if (r->sts_testing)
            util_strlcpy(o->failure, peer == NULL ? TLS_FAIL_VALIDATION :
                tls_client_failure(v), sizeof(o->failure));
        return 0;                   /* not asked for: verify=none */
    }
    util_strlcpy(o->failure, peer == NULL ? TLS_FAIL_VALIDATION :
        tls_client_failure(v), sizeof(o->failure));
    return -1;
}


void
tls_client_why(struct ssl_st *ssl, char *out, size_t outsz)
{
    long v = SSL_get_verify_result(ssl);

    if (SSL_get0_peer_certificate(ssl) == NULL)
        snprintf(out, outsz, "the server sent no certificate");
    else
        snprintf(out, outsz, "the certificate did not verify: %s",
            X509_verify_cert_error_string(v));
}
