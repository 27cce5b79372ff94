/*
 * net.c - the byte transport for SMTP sessions: plain sockets, and
 * TLS (OpenSSL 3) once STARTTLS has put an SSL object on the socket.
 *
 * CONTRACT  See net.h.  Plain: EINTR is retried; EAGAIN becomes
 *           MTA_AGAIN.  The plain path costs one pointer test over the bare
 *           syscalls.  TLS: SSL_ERROR_WANT_READ/WRITE become MTA_AGAIN with
 *           t->want set; a close without close_notify reads as end of
 *           stream (SSL_OP_IGNORE_UNEXPECTED_EOF: SMTP frames its own data,
 *           so truncation cannot pass for a complete message).  OpenSSL
 *           writes with plain send(): the worker ignores SIGPIPE (see
 *           master/child.c), which keeps "never raises SIGPIPE" true.
 * MEMORY    SSL_MODE_RELEASE_BUFFERS: an idle TLS session gives its record
 *           buffers back, keeping only the SSL object itself.  No server
 *           session cache (it would grow with clients): resumption uses
 *           stateless tickets (TLS 1.3, and TLS 1.2 clients that send the
 *           ticket extension), sealed with the daemon-wide keys of
 *           common/tlskey.h when opts->tickets is set, so any worker of
 *           any generation opens a ticket another one made.  A TLS 1.2
 *           client that only offers a session id does a full handshake.
 * CERTS     Several certificates of different key types in one context
 *           (OpenSSL keeps one per type and picks per client): ECDSA
 *           signs a handshake for a fraction of RSA-2048's CPU.
 * FAILURE   Never logs; -1 with errno kept, or a reason in err.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#include <time.h>

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "common/util.h"
#include "common/net.h"
#include "common/tlskey.h"

#define TRANSPORT_TLS_CHUNK  (INT_MAX / 2)  /* SSL_read/SSL_write take int */
#define NET_TLS_FULL_RECORD  16384          /* TLS's largest plaintext record */


void
net_init(struct net_conn *t, int fd)
{
    t->fd = fd;
    t->want = 0;
    t->ssl = NULL;
}


/* net_ssl_err - why an SSL call failed, as text for err. */
static void
net_ssl_err(SSL *ssl, int r, char *err, size_t errsz)
{
    unsigned long e = ERR_peek_last_error();
    int           code = SSL_get_error(ssl, r);

    if (code == SSL_ERROR_SSL && e != 0)
        ERR_error_string_n(e, err, errsz);
    else if (code == SSL_ERROR_SYSCALL && errno != 0)
        snprintf(err, errsz, "%s", strerror(errno));
    else if (code == SSL_ERROR_SYSCALL || code == SSL_ERROR_ZERO_RETURN)
        snprintf(err, errsz, "connection closed by the peer");
    else
        snprintf(err, errsz, "TLS error %d", code);
    ERR_clear_error();
}


/* net_tls_again - map an SSL error to MTA_AGAIN (t->want set) or -1
 * (errno set: EPROTO for a protocol error); 0 for a clean end. */
static ssize_t
net_tls_again(struct net_conn *t, int r)
{
    int code = SSL_get_error(t->ssl, r);

    switch (code) {
    case SSL_ERROR_WANT_READ:
        t->want = NET_WANT_READ;
        return MTA_AGAIN;
    case SSL_ERROR_WANT_WRITE:
        t->want = NET_WANT_WRITE;
        return MTA_AGAIN;
    case SSL_ERROR_ZERO_RETURN:
        return 0;
    case SSL_ERROR_SYSCALL:
        ERR_clear_error();
        if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) {
            t->want = NET_WANT_READ;
            return MTA_AGAIN;
        }
        if (errno == 0)
            return 0;
        return -1;
    default:
        ERR_clear_error();
        errno = EPROTO;
        return -1;
    }
}


/* net_tls_read - as many records as fit: one SSL_read returns at
 * most one record (16 KiB), the buffer is usually 128 KiB. */
static ssize_t
net_tls_read(struct net_conn *t, void *p, size_t n)
{
    size_t  got = 0, want;
    ssize_t rc;
    int     r;

    while (got < n) {
        want = n - got > TRANSPORT_TLS_CHUNK ? TRANSPORT_TLS_CHUNK : n - got;
        ERR_clear_error();
        errno = 0;
        r = SSL_read(t->ssl, (char *)p + got, (int)want);
        if (r > 0) {
            got += (size_t)r;
            /* A short record with nothing more buffered (read-ahead took
             * all the socket had): the flight is in; another read would
             * be an EAGAIN, and the level-triggered loop calls again if
             * more comes.  Full records (bulk data) go on filling p. */
            if (r < NET_TLS_FULL_RECORD && !SSL_has_pending(t->ssl))
                break;
            continue;
        }
        rc = net_tls_again(t, r);
        /* Hand over what was read; an error or the end shows up again on
         * the next call (the SSL object stays in that state). */
        return got > 0 ? (ssize_t)got : rc;
    }
    return (ssize_t)got;
}


/* net_tls_write - record by record (SSL_MODE_ENABLE_PARTIAL_WRITE),
 * so a short count is exact; MTA_AGAIN only when nothing was taken. */
static ssize_t
net_tls_write(struct net_conn *t, const void *p, size_t n)
{
    size_t  done = 0, want;
    ssize_t rc;
    int     r;

    while (done < n) {
        want = n - done > TRANSPORT_TLS_CHUNK ? TRANSPORT_TLS_CHUNK : n - done;
        ERR_clear_error();
        errno = 0;
        r = SSL_write(t->ssl, (const char *)p + done, (int)want);
        if (r > 0) {
            done += (size_t)r;
            continue;
        }
        rc = net_tls_again(t, r);
        if (rc == 0) {
            errno = EPIPE;          /* closed under a write */
            rc = -1;
        }
        return done > 0 ? (ssize_t)done : rc;
    }
    return (ssize_t)done;
}


ssize_t
net_read(struct net_conn *t, void *p, size_t n)
{
    ssize_t r;

    if (t->ssl != NULL)
        return net_tls_read(t, p, n);
    do
        r = recv(t->fd, p, n, 0);
    while (r < 0 && errno == EINTR);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return MTA_AGAIN;
    return r;
}


ssize_t
net_write(struct net_conn *t, const void *p, size_t n)
{
    ssize_t r;

    if (t->ssl != NULL)
        return net_tls_write(t, p, n);
    do
        r = send(t->fd, p, n, MSG_NOSIGNAL);
    while (r < 0 && errno == EINTR);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return MTA_AGAIN;
    return r;
}


void
net_close(struct net_conn *t)
{
    if (t->ssl != NULL) {
        /* One try at close_notify; never wait for the client's. */
        if (SSL_is_init_finished(t->ssl))
            (void)SSL_shutdown(t->ssl);
        ERR_clear_error();
        SSL_free(t->ssl);
        t->ssl = NULL;
    }
    if (t->fd >= 0)
        close(t->fd);
    t->fd = -1;
}


/* --- TLS setup -------------------------------------------------------- */

static void
net_ctx_err(const char *what, const char *file, char *err,
    size_t errsz)
{
    char why[256];

    why[0] = '\0';
    if (ERR_peek_last_error() != 0)
        ERR_error_string_n(ERR_peek_last_error(), why, sizeof(why));
    snprintf(err, errsz, "%s%s%s: %s", what, file ? " " : "",
        file ? file : "", why[0] ? why : "unknown OpenSSL error");
    ERR_clear_error();
}


/* net_ticket_mac - the HMAC-SHA256 key of a ticket key into hctx. */
static int
net_ticket_mac(EVP_MAC_CTX *hctx, struct tlskey *k)
{
    OSSL_PARAM p[3];

    p[0] = OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_KEY, k->hmac,
        sizeof(k->hmac));
    p[1] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST,
        (char *)"SHA256", 0);
    p[2] = OSSL_PARAM_construct_end();
    return EVP_MAC_CTX_set_params(hctx, p) == 1 ? 0 : -1;
}


/* net_ticket_cb - OpenSSL's ticket key callback (RFC 5077 layout: name,
 * IV, AES-256-CBC, HMAC-SHA256), with the keys of the shared ring.
 * Encrypting: the current key, 1.  Decrypting: 2 with the current or
 * the previous key (see below), 0 for a name we do not know (a full
 * handshake), -1 on an internal error. */
static int
net_ticket_cb(SSL *ssl, unsigned char *name, unsigned char *iv,
    EVP_CIPHER_CTX *cctx, EVP_MAC_CTX *hctx, int enc)
{
    const struct tlskey_ring *ring;
    struct tlskey             k;
    int                       rc = -1;

    ring = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
    if (ring == NULL)
        return -1;
    if (enc) {
        tlskey_current(ring, &k);
        memcpy(name, k.name, TLSKEY_NAME_LEN);
        if (RAND_bytes(iv, EVP_CIPHER_get_iv_length(EVP_aes_256_cbc())) != 1)
            goto out;
        if (EVP_EncryptInit_ex(cctx, EVP_aes_256_cbc(), NULL, k.aes,
            iv) != 1 || net_ticket_mac(hctx, &k) < 0)
            goto out;
        rc = 1;
    } else {
        if (tlskey_find(ring, name, &k) < 0)
            return 0;
        if (net_ticket_mac(hctx, &k) < 0 ||
            EVP_DecryptInit_ex(cctx, EVP_aes_256_cbc(), NULL, k.aes,
            iv) != 1)
            goto out;
        /* Always 2, "renew": OpenSSL then sends a fresh ticket, sealed
         * with the current key, on every resumed connection.  TLS 1.3
         * clients should use a ticket once (RFC 8446 C.4), and OpenSSL's
         * does not offer a spent one again: with 1 (no new ticket) a
         * client that keeps its last session did a full handshake every
         * other connection.  For TLS
         * 1.2 it moves a ticket made with the previous key forward. */
        rc = 2;
    }
out:
    tlskey_wipe(&k);
    return rc;
}


/* net_ctx_certs - every certificate with its key; OpenSSL files each in
 * the slot of its key type, and a second one of the same type replaces
 * the first, which the config check refuses before we get here. */
static int
net_ctx_certs(SSL_CTX *ctx, const struct net_tls_opts *cfg, char *err,
    size_t errsz)
{
    size_t i;

    if (cfg->ncerts == 0 || cfg->ncerts > NET_TLS_MAX_CERTS) {
        snprintf(err, errsz, "tls.cert_file: %zu certificates (1 to %d)",
            cfg->ncerts, NET_TLS_MAX_CERTS);
        return -1;
    }
    for (i = 0; i < cfg->ncerts; i++) {
        if (SSL_CTX_use_certificate_chain_file(ctx, cfg->cert_files[i])
            != 1) {
            net_ctx_err("tls.cert_file", cfg->cert_files[i], err, errsz);
            return -1;
        }
        if (SSL_CTX_use_PrivateKey_file(ctx, cfg->key_files[i],
            SSL_FILETYPE_PEM) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
            net_ctx_err("tls.key_file", cfg->key_files[i], err, errsz);
            return -1;
        }
    }
    return 0;
}


void
net_tls_ctx_io(struct ssl_ctx_st *ctx)
{
    /* Read-ahead: one read() takes what the socket holds (a record
     * header and its body, a whole flight) instead of two per record;
     * bytes it takes beyond a record wait in the SSL object, which
     * net_pending() reports. */
    SSL_CTX_set_read_ahead(ctx, 1);
}


struct ssl_ctx_st *
net_tls_ctx(const struct net_tls_opts *cfg, char *err, size_t errsz)
{
    SSL_CTX *ctx;

    ERR_clear_error();
    if ((ctx = SSL_CTX_new(TLS_server_method())) == NULL) {
        net_ctx_err("SSL_CTX_new", NULL, err, errsz);
        return NULL;
    }
    /* No renegotiation: a write never has to wait for a read. */
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION
        | SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_IGNORE_UNEXPECTED_EOF);
    /* No automatic chain: the chain sent is the one in tls.cert_file.
     * OpenSSL would otherwise try to build one for a lone certificate on
     * every handshake, from a store that is empty here (nothing is ever
     * loaded into it), so the attempt costs CPU and never adds a cert. */
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
        SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS |
        SSL_MODE_NO_AUTO_CHAIN);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    net_tls_ctx_io(ctx);
    (void)SSL_CTX_set_num_tickets(ctx, 1);
    if (cfg->tickets != NULL) {
        /* A ticket outlives neither of the two periods its key is kept. */
        SSL_CTX_set_app_data(ctx, (void *)cfg->tickets);
        (void)SSL_CTX_set_timeout(ctx,
            (long)(tlskey_period_ms(cfg->tickets) / 1000));
        if (SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, net_ticket_cb) != 1) {
            net_ctx_err("session tickets", NULL, err, errsz);
            goto fail;
        }
    }
    if (SSL_CTX_set1_groups_list(ctx, NET_TLS_GROUPS) != 1) {
        net_ctx_err("key exchange groups", NULL, err, errsz);
        goto fail;
    }
    if (SSL_CTX_set_min_proto_version(ctx, cfg->min_version) != 1) {
        net_ctx_err("tls.min_version", NULL, err, errsz);
        goto fail;
    }
    if (net_ctx_certs(ctx, cfg, err, errsz) < 0)
        goto fail;
    if (cfg->ciphers != NULL &&
        SSL_CTX_set_cipher_list(ctx, cfg->ciphers) != 1) {
        net_ctx_err("tls.ciphers", NULL, err, errsz);
        goto fail;
    }
    return ctx;
fail:
    SSL_CTX_free(ctx);
    return NULL;
}


void
net_tls_ctx_free(struct ssl_ctx_st *ctx)
{
    SSL_CTX_free(ctx);
}


/* net_tls_new - an SSL object on t's fd, accept or connect side. */
static int
net_tls_new(struct net_conn *t, struct ssl_ctx_st *ctx, int client,
    char *err, size_t errsz)
{
    SSL *ssl;

    ERR_clear_error();
    if ((ssl = SSL_new(ctx)) == NULL) {
        net_ctx_err("SSL_new", NULL, err, errsz);
        return -1;
    }
    if (SSL_set_fd(ssl, t->fd) != 1) {
        net_ctx_err("SSL_set_fd", NULL, err, errsz);
        SSL_free(ssl);
        return -1;
    }
    if (client)
        SSL_set_connect_state(ssl);
    else
        SSL_set_accept_state(ssl);
    t->ssl = ssl;
    t->want = 0;
    return 0;
}


int
net_tls_start_client(struct net_conn *t, struct ssl_ctx_st *ctx, char *err,
    size_t errsz)
{
    return net_tls_new(t, ctx, 1, err, errsz);
}


int
net_tls_start(struct net_conn *t, struct ssl_ctx_st *ctx, char *err,
    size_t errsz)
{
    SSL *ssl;

    ERR_clear_error();
    if ((ssl = SSL_new(ctx)) == NULL) {
        net_ctx_err("SSL_new", NULL, err, errsz);
        return -1;
    }
    if (SSL_set_fd(ssl, t->fd) != 1) {
        net_ctx_err("SSL_set_fd", NULL, err, errsz);
        SSL_free(ssl);
        return -1;
    }
    SSL_set_accept_state(ssl);
    t->ssl = ssl;
    t->want = 0;
    return 0;
}


int
net_tls_handshake(struct net_conn *t, char *err, size_t errsz)
{
    int r;

    ERR_clear_error();
    errno = 0;
    r = SSL_do_handshake(t->ssl);       /* accept or connect, as started */
    if (r == 1)
        return 0;
    switch (SSL_get_error(t->ssl, r)) {
    case SSL_ERROR_WANT_READ:
        t->want = NET_WANT_READ;
        return MTA_AGAIN;
    case SSL_ERROR_WANT_WRITE:
        t->want = NET_WANT_WRITE;
        return MTA_AGAIN;
    default:
        net_ssl_err(t->ssl, r, err, errsz);
        return -1;
    }
}


int
net_pending(const struct net_conn *t)
{
    /* processed or not: with read-ahead a whole record can wait raw */
    return t->ssl != NULL && SSL_has_pending(t->ssl) == 1;
}


const char *
net_tls_version(const struct net_conn *t)
{
    return t->ssl != NULL ? SSL_get_version(t->ssl) : "none";
}


const char *
net_tls_cipher(const struct net_conn *t, int *bits, int *alg_bits)
{
    const SSL_CIPHER *c = t->ssl != NULL ? SSL_get_current_cipher(t->ssl)
                                         : NULL;

    *bits = *alg_bits = 0;
    if (c == NULL)
        return "none";
    *bits = SSL_CIPHER_get_bits(c, alg_bits);
    return SSL_CIPHER_get_name(c);
}


int
net_tls_resumed(const struct net_conn *t)
{
    return t->ssl != NULL && SSL_session_reused(t->ssl) == 1;
}


/* net_key_kind - "RSA 2048 bits", "ECDSA P-256", "ED25519". */
static void
net_key_kind(EVP_PKEY *pk, char *out, size_t outsz)
{
    char group[64];

    if (EVP_PKEY_is_a(pk, "RSA")) {
        snprintf(out, outsz, "RSA %d bits", EVP_PKEY_get_bits(pk));
    } else if (EVP_PKEY_is_a(pk, "EC")) {
        group[0] = '\0';
        (void)EVP_PKEY_get_utf8_string_param(pk, OSSL_PKEY_PARAM_GROUP_NAME,
            group, sizeof(group), NULL);
        snprintf(out, outsz, "ECDSA %s", strcmp(group, "prime256v1") == 0 ?
            "P-256" : strcmp(group, "secp384r1") == 0 ? "P-384" :
            group[0] ? group : "?");
    } else {
        snprintf(out, outsz, "%s", EVP_PKEY_get0_type_name(pk) ?
            EVP_PKEY_get0_type_name(pk) : "unknown key");
    }
}


int
net_tls_cert_info(const char *file, char *out, size_t outsz)
{
    FILE      *f;
    X509      *x;
    EVP_PKEY  *pk;
    struct tm  tm;
    time_t     now = time(NULL), end;
    char       kind[80], subj[256], when[32];
    int        days, secs;

    ERR_clear_error();
    if ((f = fopen(file, "r")) == NULL) {
        snprintf(out, outsz, "%s", strerror(errno));
        return -1;
    }
    x = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    if (x == NULL) {
        net_ctx_err("no PEM certificate", NULL, out, outsz);
        return -1;
    }
    if ((pk = X509_get0_pubkey(x)) != NULL)
        net_key_kind(pk, kind, sizeof(kind));
    else
        snprintf(kind, sizeof(kind), "unreadable key");
    X509_NAME_oneline(X509_get_subject_name(x), subj, sizeof(subj));
    if (ASN1_TIME_to_tm(X509_get0_notAfter(x), &tm) != 1) {
        X509_free(x);
        snprintf(out, outsz, "unreadable expiry date");
        return -1;
    }
    end = timegm(&tm);
    strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
    if (ASN1_TIME_diff(&days, &secs, NULL, X509_get0_notAfter(x)) != 1)
        days = (int)((end - now) / 86400);
    if (end <= now)
        snprintf(out, outsz, "%s, %s, EXPIRED %s (%d days ago)", kind, subj,
            when, -days);
    else
        snprintf(out, outsz, "%s, %s, expires %s (in %d days)", kind, subj,
            when, days);
    X509_free(x);
    ERR_clear_error();
    return 0;
}
