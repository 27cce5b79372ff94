/*
 * net.h - the byte transport under an SMTP session, inbound or outbound:
 * read, write, close, and TLS (an SSL * next to the fd) without the
 * protocol code knowing which one it talks through.
 *
 * CONTRACT  The fd is non-blocking.  net_read() returns bytes read,
 *           0 at end of stream, MTA_AGAIN when nothing is there, or -1
 *           (errno kept; EPROTO for a TLS protocol error).
 *           net_write()/_writev() return bytes written (possibly
 *           short), MTA_AGAIN, or -1; they never raise SIGPIPE.
 *           net_close() closes the fd (after a best-effort TLS
 *           close_notify); the caller unwatches it first.
 * TLS       net_tls_start() puts an SSL object on the fd; then
 *           net_tls_handshake() until it returns 0.  After every
 *           MTA_AGAIN, t->want says which readiness the TLS engine waits
 *           for (a TLS read may need the socket writable and back).  A
 *           write that returned MTA_AGAIN must be retried with the same
 *           bytes (more may follow them; the buffer may move).  TLS reads
 *           decrypt whole records: bytes can be left inside the SSL object
 *           with nothing on the socket, so a caller on a level-triggered
 *           loop must read again while net_pending() says so.
 * FAILURE   Never logs; the TLS calls give a reason in err.
 */
#ifndef MTAD_NET_H
#define MTAD_NET_H

#include <stddef.h>
#include <sys/types.h>

struct ssl_st;
struct ssl_ctx_st;

#define NET_WANT_READ   1u
#define NET_WANT_WRITE  2u

struct net_conn {
    int            fd;
    unsigned       want;            /* NET_WANT_*, after MTA_AGAIN */
    struct ssl_st *ssl;             /* NULL: plain */
};

void    net_init(struct net_conn *t, int fd);
ssize_t net_read(struct net_conn *t, void *p, size_t n);
ssize_t net_write(struct net_conn *t, const void *p, size_t n);
void    net_close(struct net_conn *t);

/* What a server context is built from (relay.yaml's tls.* keys).  Up to
 * NET_TLS_MAX_CERTS certificates, each with its key (cert_files[i] goes
 * with key_files[i]), of different key types: OpenSSL picks per client
 * (an ECDSA one for a client that offers ECDSA, RSA for the others). */
#define NET_TLS_MAX_CERTS 4
struct tlskey_ring;
struct net_tls_opts {
    const char *const *cert_files;  /* PEM chains, leaf first */
    const char *const *key_files;
    size_t      ncerts;
    int         min_version;        /* TLS1_2_VERSION ... */
    const char *ciphers;            /* NULL: OpenSSL's default */
    /* Session-ticket keys shared by every worker (common/tlskey.h); NULL:
     * OpenSSL's own random key, valid in this context only. */
    const struct tlskey_ring *tickets;
};

/* The key-exchange groups offered, X25519 first (the cheapest). */
#define NET_TLS_GROUPS "X25519:P-256:X448:P-521:P-384:ffdhe2048:ffdhe3072"

struct ssl_ctx_st *net_tls_ctx(const struct net_tls_opts *cfg, char *err,
            size_t errsz);
void    net_tls_ctx_free(struct ssl_ctx_st *ctx);     /* NULL ok */
/* The I/O settings every context of ours gets, server or client (read-
 * ahead: see net_pending()). */
void    net_tls_ctx_io(struct ssl_ctx_st *ctx);
int     net_tls_start(struct net_conn *t, struct ssl_ctx_st *ctx,
            char *err, size_t errsz);                     /* 0 or -1 */
/* The client side (outbound STARTTLS): an SSL object from a client
 * context (the caller sets SNI and checks on t->ssl before the first
 * net_tls_handshake()). */
int     net_tls_start_client(struct net_conn *t, struct ssl_ctx_st *ctx,
            char *err, size_t errsz);                     /* 0 or -1 */
int     net_tls_handshake(struct net_conn *t, char *err,
            size_t errsz);                    /* 0 done, MTA_AGAIN, -1 */
/* Bytes waiting inside the SSL object, decrypted or still a raw record
 * read ahead from the socket (0 when plain). */
int     net_pending(const struct net_conn *t);
/* After the handshake: the protocol ("TLSv1.3"), the cipher name, and its
 * strength in bits (used and of the algorithm). */
const char *net_tls_version(const struct net_conn *t);
const char *net_tls_cipher(const struct net_conn *t, int *bits,
            int *alg_bits);
/* Whether the handshake resumed a session (a ticket); 0 when plain. */
int     net_tls_resumed(const struct net_conn *t);
/* One line about the first certificate of a PEM file: key type and size,
 * subject, and when it expires ("RSA 2048 bits, CN=mx.example.org,
 * expires 2027-03-01 12:00:00 UTC (in 89 days)"); 0, or -1 with the
 * reason in out. */
int     net_tls_cert_info(const char *file, char *out, size_t outsz);

#endif /* MTAD_NET_H */
