/*
 * dkim_sign_bench.c - CPU cost of signing one message with dkim/, without the
 * rest of mtad: the process CPU time (CLOCK_PROCESS_CPUTIME_ID, so other
 * load on the machine does not count) of begin, feed (in 4 KiB pieces),
 * prepare, end, for a message like smtpblast's (about 1 KiB), per
 * algorithm; of the canonicalisation and body hash alone; and of the
 * private-key operation alone on a SHA-256 digest, done the way dkim.c
 * does it (RSA: EVP_PKEY_sign on a context set up once; Ed25519:
 * EVP_DigestSignInit + EVP_DigestSign per message), so that "signing
 * minus the operation" is the work of dkim/ itself.  Two more Ed25519
 * rows show what the per-message EVP_DigestSignInit costs: the context
 * initialised once and reused (works on OpenSSL 3.0; 3.2 and later refuse
 * a second EVP_DigestSign without a new init, openssl/openssl#23075), and
 * a copy (EVP_MD_CTX_copy_ex) of a context initialised once.
 *
 * Usage: build/bench/dkim_sign_bench [-n MESSAGES] [-z BODY_BYTES]
 * Prints one line per case: microseconds per message and CPU seconds per
 * 1,000 messages (median of 5 rounds), and the fastest round (on a
 * shared machine other load only ever adds to a round's time).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/pem.h>

#include "dkim/dkim.h"

static double
cpu_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static EVP_PKEY *bench_pk[3];       /* the keys, for the bare operations */

static struct dkim_keys *
make_keys(int alg)
{
    char              path[] = "/tmp/dkim_sign_bench.XXXXXX", err[256];
    struct dkim_keys *ks = dkim_keys_new();
    EVP_PKEY         *pk;
    FILE             *f;
    int               fd = mkstemp(path);

    pk = alg == DKIM_RSA_SHA256 ?
        EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)2048) :
        EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
    if (ks == NULL || pk == NULL || fd < 0 || (f = fdopen(fd, "w")) == NULL ||
        PEM_write_PrivateKey(f, pk, NULL, NULL, 0, NULL, NULL) != 1) {
        fprintf(stderr, "dkim_sign_bench: key setup failed\n");
        exit(1);
    }
    fclose(f);
    if (dkim_keys_add(ks, "bench.example", "s1", path, alg, err,
        sizeof(err)) != DKIM_OK) {
        fprintf(stderr, "dkim_sign_bench: %s\n", err);
        exit(1);
    }
    unlink(path);
    bench_pk[alg] = pk;
    return ks;
}

static void
sign_one(const struct dkim_keys *ks, const char *msg, size_t n, char *out,
    size_t outsz)
{
    struct dkim_sign *c = dkim_sign_begin(ks, (int64_t)time(NULL));
    size_t            off, len = 0, piece;
    int               prepared = 0;

    for (off = 0; off < n; off += piece) {
        piece = n - off < 4096 ? n - off : 4096;
        dkim_sign_feed(c, msg + off, piece);
        if (!prepared && dkim_sign_header_done(c)) {
            prepared = 1;
            if (dkim_sign_prepare(c, &len) != DKIM_OK)
                exit(1);
        }
    }
    if ((!prepared && dkim_sign_prepare(c, &len) != DKIM_OK) || len > outsz ||
        dkim_sign_end(c, out, outsz) != DKIM_OK) {
        fprintf(stderr, "dkim_sign_bench: signing failed\n");
        exit(1);
    }
    dkim_sign_free(c);
}

static void
discard(void *arg, const char *p, size_t n)
{
    EVP_DigestUpdate(arg, p, n);
}

static void
hash_one(const char *msg, size_t n)
{
    struct dkim_body b;
    unsigned char    md[EVP_MAX_MD_SIZE];
    EVP_MD_CTX      *m = EVP_MD_CTX_new();

    EVP_DigestInit_ex(m, EVP_sha256(), NULL);
    dkim_body_init(&b, discard, m);
    dkim_body_feed(&b, msg, n);
    dkim_body_end(&b);
    EVP_DigestFinal_ex(m, md, NULL);
    EVP_MD_CTX_free(m);
}

/* op_* - the private-key operation alone, on a fixed digest. */
static EVP_PKEY_CTX *op_rsa;
static EVP_MD_CTX   *op_ed;

static void
op_setup(void)
{
    op_rsa = EVP_PKEY_CTX_new_from_pkey(NULL, bench_pk[DKIM_RSA_SHA256],
        NULL);
    op_ed = EVP_MD_CTX_new();
    if (op_rsa == NULL || op_ed == NULL || EVP_PKEY_sign_init(op_rsa) != 1 ||
        EVP_PKEY_CTX_set_rsa_padding(op_rsa, RSA_PKCS1_PADDING) != 1 ||
        EVP_PKEY_CTX_set_signature_md(op_rsa, EVP_sha256()) != 1 ||
        EVP_DigestSignInit(op_ed, NULL, NULL, NULL,
        bench_pk[DKIM_ED25519_SHA256]) != 1) {
        fprintf(stderr, "dkim_sign_bench: operation setup failed\n");
        exit(1);
    }
}

static void
op_one(int which)
{
    static const unsigned char md[32] = { 1, 2, 3 };
    unsigned char sig[1024];
    size_t        siglen = sizeof(sig);
    EVP_MD_CTX   *m;
    int           ok;

    if (which == 3) {
        ok = EVP_PKEY_sign(op_rsa, sig, &siglen, md, sizeof(md)) == 1;
    } else if (which == 4) {
        m = EVP_MD_CTX_new();
        ok = m != NULL && EVP_DigestSignInit(m, NULL, NULL, NULL,
            bench_pk[DKIM_ED25519_SHA256]) == 1 &&
            EVP_DigestSign(m, sig, &siglen, md, sizeof(md)) == 1;
        EVP_MD_CTX_free(m);
    } else if (which == 5) {
        ok = EVP_DigestSign(op_ed, sig, &siglen, md, sizeof(md)) == 1;
    } else {
        m = EVP_MD_CTX_new();
        ok = m != NULL && EVP_MD_CTX_copy_ex(m, op_ed) == 1 &&
            EVP_DigestSign(m, sig, &siglen, md, sizeof(md)) == 1;
        EVP_MD_CTX_free(m);
    }
    if (!ok) {
        fprintf(stderr, "dkim_sign_bench: operation %d failed\n", which);
        exit(1);
    }
}

int
main(int argc, char **argv)
{
    static char out[8192];
    const char *names[] = { "canonicalise + body hash only", "rsa-sha256 "
        "(2048-bit)", "ed25519-sha256", "RSA-2048 operation alone",
        "Ed25519 operation alone", "Ed25519 op, context kept",
        "Ed25519 op, context copied" };
    struct dkim_keys *ks[3] = { NULL, NULL, NULL };
    size_t            n = 2000, body = 1024, len, i;
    double            t[5], t0;
    char             *msg;
    int               ch, k, r;

    while ((ch = getopt(argc, argv, "n:z:")) != -1) {
        if (ch == 'n')
            n = (size_t)atol(optarg);
        else if (ch == 'z')
            body = (size_t)atol(optarg);
        else {
            fprintf(stderr, "usage: dkim_sign_bench [-n MESSAGES] [-z BODY]\n");
            return 2;
        }
    }
    msg = malloc(body + 512);
    len = (size_t)sprintf(msg, "From: <blast@bench.example>\r\n"
        "To: <rcpt0@sink.example>\r\nSubject: smtpblast benchmark message\r\n"
        "Message-ID: <1@bench.example>\r\n\r\n");
    for (i = 0; i < body; i++)
        msg[len++] = (i % 64 == 62) ? '\r' : (i % 64 == 63) ? '\n' :
            (char)('a' + i % 26);
    ks[1] = make_keys(DKIM_RSA_SHA256);
    ks[2] = make_keys(DKIM_ED25519_SHA256);
    op_setup();
    for (k = 0; k < 7; k++) {
        for (r = 0; r < 5; r++) {
            t0 = cpu_now();
            for (i = 0; i < n; i++) {
                if (k == 0)
                    hash_one(msg, len);
                else if (k < 3)
                    sign_one(ks[k], msg, len, out, sizeof(out));
                else
                    op_one(k);
            }
            t[r] = (cpu_now() - t0) / (double)n;
        }
        qsort(t, 5, sizeof(t[0]), cmp_double);
        printf("%-32s %8.1f us/msg  %.4f CPU s/1000 msgs  (min %.1f us; "
            "%zu-byte message, median of 5 x %zu)\n", names[k], t[2] * 1e6,
            t[2] * 1000, t[0] * 1e6, len, n);
    }
    dkim_keys_free(ks[1]);
    dkim_keys_free(ks[2]);
    EVP_PKEY_CTX_free(op_rsa);
    EVP_MD_CTX_free(op_ed);
    EVP_PKEY_free(bench_pk[DKIM_RSA_SHA256]);
    EVP_PKEY_free(bench_pk[DKIM_ED25519_SHA256]);
    free(msg);
    return 0;
}
