/*
 * transport.h - the byte transport under an SMTP session: read, write,
 * close, and STARTTLS (an SSL * next to the fd) without the protocol code
 * knowing which one it talks through.
 *
 * CONTRACT  The fd is non-blocking.  transport_read() returns bytes read,
 *           0 at end of stream, MTA_AGAIN when nothing is there, or -1
 *           (errno kept; EPROTO for a TLS protocol error).
 *           transport_write()/_writev() return bytes written (possibly
 *           short), MTA_AGAIN, or -1; they never raise SIGPIPE.
 *           transport_close() closes the fd (after a best-effort TLS
 *           close_notify); the caller unwatches it first.
 * TLS       transport_tls_start() puts an SSL object on the fd; then
 *           transport_tls_handshake() until it returns 0.  After every
 *           MTA_AGAIN, t->want says which readiness the TLS engine waits
 *           for (a TLS read may need the socket writable and back).  A
 *           write that returned MTA_AGAIN must be retried with the same
 *           bytes (more may follow them; the buffer may move).  TLS reads
 *           decrypt whole records: bytes can be left inside the SSL object
 *           with nothing on the socket, so a caller on a level-triggered
 *           loop must read again while transport_pending() says so.
 * FAILURE   Never logs; the TLS calls give a reason in err.
 */
#ifndef MTAD_TRANSPORT_H
#define MTAD_TRANSPORT_H

#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

struct config;
struct ssl_st;
struct ssl_ctx_st;

#define TRANSPORT_WANT_READ   1u
#define TRANSPORT_WANT_WRITE  2u

struct transport {
    int            fd;
    unsigned       want;            /* TRANSPORT_WANT_*, after MTA_AGAIN */
    struct ssl_st *ssl;             /* NULL: plain */
};

void    transport_init(struct transport *t, int fd);
ssize_t transport_read(struct transport *t, void *p, size_t n);
ssize_t transport_write(struct transport *t, const void *p, size_t n);
ssize_t transport_writev(struct transport *t, const struct iovec *iov,
            int iovcnt);
void    transport_close(struct transport *t);

/* The server context for cfg's tls.* keys (cfg->tls_cert_file set); NULL
 * and a reason in err on failure. */
struct ssl_ctx_st *transport_tls_ctx(const struct config *cfg, char *err,
            size_t errsz);
void    transport_tls_ctx_free(struct ssl_ctx_st *ctx);     /* NULL ok */
int     transport_tls_start(struct transport *t, struct ssl_ctx_st *ctx,
            char *err, size_t errsz);                     /* 0 or -1 */
int     transport_tls_handshake(struct transport *t, char *err,
            size_t errsz);                    /* 0 done, MTA_AGAIN, -1 */
/* Decrypted bytes waiting inside the SSL object (0 when plain). */
int     transport_pending(const struct transport *t);
/* After the handshake: the protocol ("TLSv1.3"), the cipher name, and its
 * strength in bits (used and of the algorithm). */
const char *transport_tls_version(const struct transport *t);
const char *transport_tls_cipher(const struct transport *t, int *bits,
            int *alg_bits);

#endif /* MTAD_TRANSPORT_H */
