/*
 * bench/tls_hs_cost.c - what a full TLS handshake costs the server alone.
 *
 * PURPOSE   A floor for the TLS rows of `make bench` (bench/tlsvs.py): a
 *           server that does a full handshake per message cannot spend less
 *           CPU per message than OpenSSL's own server side of that
 *           handshake.  Client and server run in this one process over a
 *           memory BIO pair (no sockets, no SMTP, no kernel), and only the
 *           server's calls are timed, on the thread's CPU clock.  TLS 1.3,
 *           X25519 first, no session tickets, no client certificate: the
 *           least a server can do for a new client.
 * CONTRACT  tls_hs_cost CERT KEY [N]  ->  one line on stdout:
 *             handshakes=N server_cpu_ms=X client_cpu_ms=Y
 *           (milliseconds of CPU per handshake).  Exit 0, or 1 with a
 *           message on stderr when a handshake fails.
 * FAILURE   Every handshake is bounded: a pass that makes no progress on
 *           either side fails the run instead of looping.
 */
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static SSL_CTX *make_ctx(int server, const char *cert, const char *key)
{
    SSL_CTX *ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());

    if (ctx == NULL)
        return NULL;
    SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    if (!SSL_CTX_set1_groups_list(ctx, "X25519:P-256"))
        goto fail;
    if (server) {
        SSL_CTX_set_num_tickets(ctx, 0);
        if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1 ||
            SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1)
            goto fail;
    }
    return ctx;
fail:
    SSL_CTX_free(ctx);
    return NULL;
}

/* One full handshake; adds each side's CPU seconds to *scpu and *ccpu. */
static int handshake(SSL_CTX *sctx, SSL_CTX *cctx, double *scpu, double *ccpu)
{
    SSL *s = SSL_new(sctx), *c = SSL_new(cctx);
    BIO *sb = NULL, *cb = NULL;
    int sdone = 0, cdone = 0, ok = 0;

    if (s == NULL || c == NULL || !BIO_new_bio_pair(&sb, 0, &cb, 0))
        goto out;
    SSL_set_bio(s, sb, sb);
    SSL_set_bio(c, cb, cb);
    SSL_set_accept_state(s);
    SSL_set_connect_state(c);
    for (int pass = 0; pass < 64 && !(sdone && cdone); pass++) {
        double t0 = cpu_now();
        int r;

        if (!cdone) {
            r = SSL_do_handshake(c);
            if (r == 1)
                cdone = 1;
            else if (SSL_get_error(c, r) != SSL_ERROR_WANT_READ)
                goto out;
        }
        double t1 = cpu_now();
        if (!sdone) {
            r = SSL_do_handshake(s);
            if (r == 1)
                sdone = 1;
            else if (SSL_get_error(s, r) != SSL_ERROR_WANT_READ)
                goto out;
        }
        double t2 = cpu_now();
        *ccpu += t1 - t0;
        *scpu += t2 - t1;
    }
    ok = sdone && cdone;
out:
    SSL_free(s);                    /* frees the BIOs it owns */
    SSL_free(c);
    return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
    int n = argc > 3 ? atoi(argv[3]) : 300;
    double scpu = 0, ccpu = 0;

    if (argc < 3 || n <= 0 || n > 1000000) {
        fprintf(stderr, "usage: tls_hs_cost CERT KEY [N]\n");
        return 1;
    }
    SSL_CTX *sctx = make_ctx(1, argv[1], argv[2]), *cctx = make_ctx(0, NULL, NULL);
    if (sctx == NULL || cctx == NULL) {
        fprintf(stderr, "tls_hs_cost: cannot load %s / %s\n", argv[1], argv[2]);
        ERR_print_errors_fp(stderr);
        return 1;
    }
    if (handshake(sctx, cctx, &scpu, &ccpu) != 0) {        /* warm-up */
        fprintf(stderr, "tls_hs_cost: handshake failed\n");
        ERR_print_errors_fp(stderr);
        return 1;
    }
    scpu = ccpu = 0;
    for (int i = 0; i < n; i++) {
        if (handshake(sctx, cctx, &scpu, &ccpu) != 0) {
            fprintf(stderr, "tls_hs_cost: handshake %d failed\n", i);
            ERR_print_errors_fp(stderr);
            return 1;
        }
    }
    printf("handshakes=%d server_cpu_ms=%.4f client_cpu_ms=%.4f\n", n,
           scpu / n * 1000, ccpu / n * 1000);
    SSL_CTX_free(sctx);
    SSL_CTX_free(cctx);
    return 0;
}
