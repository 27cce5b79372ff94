/*
 * tlsblast.c - benchmark STARTTLS load client.
 *
 * PURPOSE   The TLS rows of the bench (bench/tls_bench.py): S sessions,
 *           each a thread with a blocking socket, send M messages in all,
 *           K per connection, every connection upgraded with STARTTLS (a
 *           full handshake, or with -R an offer to resume the session the
 *           same thread had last).  Per message: MAIL, RCPT and DATA in
 *           one TLS write when the server offers PIPELINING, then the body
 *           and the dot.  Threads and blocking I/O keep the client simple;
 *           its own CPU time is reported so that a run can show the client
 *           was not the limit.
 * CONTRACT  tlsblast -s ADDR:PORT [-c SESSIONS] [-m MESSAGES] [-k PER_CONN]
 *                    [-z SIZE] [-R] [-3] [-T SECS]
 *           -R: resume (offer the thread's last session); -3: TLS 1.3
 *           only (default: whatever both sides prefer, TLS 1.3 here).
 *           Prints one "key=value ..." line on stdout at the end: sent
 *           accepted errors conns resumed elapsed_s msgs_per_s conns_per_s
 *           cpu_s (this process, user + system) timed_out.  Exit 0 when
 *           every message was answered, 2 when the time limit stopped the
 *           run, 1 on a usage error.
 * FAILURE   A connection that fails is counted in errors and the thread
 *           goes on with a new one; more than max(100, M) errors stop the
 *           run.  Every loop is bounded by M and by the time limit (each
 *           socket has a 10 s timeout, so a stuck server cannot hang it).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#define TB_MAXSESS 1024

static struct sockaddr_in tb_addr;
static SSL_CTX           *tb_ctx;
static char              *tb_body;          /* SIZE bytes + ".\r\n" */
static size_t             tb_bodylen;
static long               tb_msgs = 1000, tb_per = 1;
static int                tb_resume;
static double             tb_deadline;
static atomic_long        tb_next;          /* messages handed out */
static atomic_long        tb_sent, tb_ok, tb_err, tb_conns, tb_resumed;
static atomic_int         tb_timed_out;

struct tb_conn {
    int   fd;
    SSL  *ssl;
    char  in[4096];
    size_t len;
};


static double
tb_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}


static int
tb_write(struct tb_conn *c, const void *p, size_t n)
{
    size_t done = 0;
    int    r;

    while (done < n) {
        if (c->ssl != NULL)
            r = SSL_write(c->ssl, (const char *)p + done, (int)(n - done));
        else
            r = (int)send(c->fd, (const char *)p + done, n - done,
                MSG_NOSIGNAL);
        if (r <= 0)
            return -1;
        done += (size_t)r;
    }
    return 0;
}


/* tb_reply - read up to the end of the next final reply line; its code,
 * or -1.  *ehlo_pipe is set when a PIPELINING line went by. */
static int
tb_reply(struct tb_conn *c, int *ehlo_pipe)
{
    char  *nl;
    size_t linelen;
    int    r, code;

    for (;;) {
        while ((nl = memchr(c->in, '\n', c->len)) != NULL) {
            linelen = (size_t)(nl - c->in) + 1;
            if (ehlo_pipe != NULL && linelen > 14 &&
                strncasecmp(c->in + 4, "PIPELINING", 10) == 0)
                *ehlo_pipe = 1;
            if (linelen < 4 || c->in[0] < '0' || c->in[0] > '9')
                return -1;
            code = atoi(c->in);
            r = c->in[3] == ' ' || c->in[3] == '\r';
            memmove(c->in, c->in + linelen, c->len - linelen);
            c->len -= linelen;
            if (r)
                return code;
        }
        if (c->len == sizeof(c->in))
            return -1;
        if (c->ssl != NULL)
            r = SSL_read(c->ssl, c->in + c->len,
                (int)(sizeof(c->in) - c->len));
        else
            r = (int)recv(c->fd, c->in + c->len, sizeof(c->in) - c->len, 0);
        if (r <= 0)
            return -1;
        c->len += (size_t)r;
    }
}


static int
tb_cmd(struct tb_conn *c, const char *cmd, int *pipe)
{
    if (tb_write(c, cmd, strlen(cmd)) < 0)
        return -1;
    return tb_reply(c, pipe);
}


/* tb_take - claim one more message to send; 0 when all are claimed or
 * the time is up. */
static int
tb_take(void)
{
    if (tb_now() > tb_deadline) {
        atomic_store(&tb_timed_out, 1);
        return 0;
    }
    return atomic_fetch_add(&tb_next, 1) < tb_msgs;
}


/* tb_connection - one connection for the message already claimed and up
 * to tb_per - 1 more: greeting, EHLO, STARTTLS, handshake, EHLO, the
 * messages, QUIT.  0, or -1 when the connection failed; *claimed stays 1
 * while a claimed message has not been answered (the next connection
 * sends it again). */
static int
tb_connection(SSL_SESSION **sess, int *claimed)
{
    struct tb_conn c = { .fd = -1 };
    struct timeval tv = { 10, 0 };
    static const char cmds[] = "MAIL FROM:<blast@test.example>\r\n"
        "RCPT TO:<sink@test.example>\r\nDATA\r\n";
    long           i;
    int            one = 1, pipe = 0, ok = -1;

    if ((c.fd = socket(AF_INET, SOCK_STREAM, 0)) < 0)
        return -1;
    (void)setsockopt(c.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    (void)setsockopt(c.fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    (void)setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(c.fd, (struct sockaddr *)&tb_addr, sizeof(tb_addr)) < 0)
        goto out;
    atomic_fetch_add(&tb_conns, 1);
    if (tb_reply(&c, NULL) != 220 || tb_cmd(&c, "EHLO blast.test\r\n",
        NULL) != 250 || tb_cmd(&c, "STARTTLS\r\n", NULL) != 220)
        goto out;
    if ((c.ssl = SSL_new(tb_ctx)) == NULL || SSL_set_fd(c.ssl, c.fd) != 1)
        goto out;
    if (tb_resume && *sess != NULL)
        (void)SSL_set_session(c.ssl, *sess);
    if (SSL_connect(c.ssl) != 1)
        goto out;
    if (SSL_session_reused(c.ssl))
        atomic_fetch_add(&tb_resumed, 1);
    if (tb_cmd(&c, "EHLO blast.test\r\n", &pipe) != 250)
        goto out;
    for (i = 0; i < tb_per; i++) {
        if (!*claimed && !tb_take())
            break;
        *claimed = 1;
        atomic_fetch_add(&tb_sent, 1);
        if (pipe) {
            if (tb_write(&c, cmds, sizeof(cmds) - 1) < 0 ||
                tb_reply(&c, NULL) != 250 || tb_reply(&c, NULL) != 250 ||
                tb_reply(&c, NULL) != 354)
                goto out;
        } else if (tb_cmd(&c, "MAIL FROM:<blast@test.example>\r\n", NULL)
            != 250 || tb_cmd(&c, "RCPT TO:<sink@test.example>\r\n", NULL)
            != 250 || tb_cmd(&c, "DATA\r\n", NULL) != 354) {
            goto out;
        }
        if (tb_write(&c, tb_body, tb_bodylen) < 0 ||
            tb_reply(&c, NULL) != 250)
            goto out;
        *claimed = 0;
        atomic_fetch_add(&tb_ok, 1);
    }
    (void)tb_cmd(&c, "QUIT\r\n", NULL);
    ok = 0;
    if (tb_resume) {
        /* The TLS 1.3 ticket came after the handshake; it is there now. */
        SSL_SESSION_free(*sess);
        *sess = SSL_get1_session(c.ssl);
    }
out:
    if (c.ssl != NULL) {
        if (ok == 0)
            (void)SSL_shutdown(c.ssl);
        SSL_free(c.ssl);
    }
    close(c.fd);
    ERR_clear_error();
    return ok;
}


static void *
tb_thread(void *arg)
{
    SSL_SESSION *sess = NULL;
    int          claimed = 0;
    long         limit = tb_msgs > 100 ? tb_msgs : 100;

    (void)arg;
    while (claimed || tb_take()) {
        claimed = 1;
        if (tb_connection(&sess, &claimed) < 0 &&
            atomic_fetch_add(&tb_err, 1) > limit)
            break;
        if (tb_now() > tb_deadline) {
            atomic_store(&tb_timed_out, 1);
            break;
        }
    }
    SSL_SESSION_free(sess);
    return NULL;
}


static int
tb_no_chain(X509_STORE_CTX *x, void *arg)
{
    (void)x;
    (void)arg;
    return 1;
}


static void
tb_usage(void)
{
    fprintf(stderr, "usage: tlsblast -s ADDR:PORT [-c SESSIONS] [-m MESSAGES] "
        "[-k PER_CONN] [-z SIZE] [-R] [-3] [-T SECS]\n");
    exit(1);
}


int
main(int argc, char **argv)
{
    pthread_t      th[TB_MAXSESS];
    struct rusage  ru;
    char          *colon, host[64];
    long           sess = 20, size = 1024, secs = 60, i;
    double         t0, el, cpu;
    int            opt, tls13 = 0;

    memset(&tb_addr, 0, sizeof(tb_addr));
    while ((opt = getopt(argc, argv, "s:c:m:k:z:R3T:")) != -1) {
        switch (opt) {
        case 's':
            if ((colon = strrchr(optarg, ':')) == NULL ||
                (size_t)(colon - optarg) >= sizeof(host))
                tb_usage();
            memcpy(host, optarg, (size_t)(colon - optarg));
            host[colon - optarg] = '\0';
            tb_addr.sin_family = AF_INET;
            tb_addr.sin_port = htons((uint16_t)atoi(colon + 1));
            if (inet_pton(AF_INET, host, &tb_addr.sin_addr) != 1)
                tb_usage();
            break;
        case 'c': sess = atol(optarg); break;
        case 'm': tb_msgs = atol(optarg); break;
        case 'k': tb_per = atol(optarg); break;
        case 'z': size = atol(optarg); break;
        case 'R': tb_resume = 1; break;
        case '3': tls13 = 1; break;
        case 'T': secs = atol(optarg); break;
        default: tb_usage();
        }
    }
    if (tb_addr.sin_family == 0 || sess < 1 || sess > TB_MAXSESS ||
        tb_msgs < 1 || tb_per < 1 || size < 0 || size > 64L << 20 ||
        secs < 1)
        tb_usage();
    signal(SIGPIPE, SIG_IGN);
    tb_body = malloc((size_t)size + 64);
    if (tb_body == NULL)
        return 1;
    tb_bodylen = (size_t)snprintf(tb_body, 64, "Subject: tlsblast\r\n\r\n");
    for (i = 0; (size_t)i + tb_bodylen < (size_t)size; i++)
        tb_body[tb_bodylen + (size_t)i] = (i % 64 == 62) ? '\r' :
            (i % 64 == 63) ? '\n' : 'x';
    tb_bodylen += (size_t)i;
    memcpy(tb_body + tb_bodylen, "\r\n.\r\n", 5);
    tb_bodylen += 5;
    if ((tb_ctx = SSL_CTX_new(TLS_client_method())) == NULL)
        return 1;
    SSL_CTX_set_verify(tb_ctx, SSL_VERIFY_NONE, NULL);
    /* Not even a chain is built: the bench does not check the server's
     * certificate, and building one costs an OpenSSL 3 client about as
     * much CPU as the server's whole handshake, which on a small box
     * takes CPU from the server being measured. */
    SSL_CTX_set_cert_verify_callback(tb_ctx, tb_no_chain, NULL);
    SSL_CTX_set_read_ahead(tb_ctx, 1);
    SSL_CTX_set_session_cache_mode(tb_ctx, SSL_SESS_CACHE_CLIENT |
        SSL_SESS_CACHE_NO_INTERNAL_STORE);
    if (tls13)
        (void)SSL_CTX_set_min_proto_version(tb_ctx, TLS1_3_VERSION);
    t0 = tb_now();
    tb_deadline = t0 + (double)secs;
    for (i = 0; i < sess; i++)
        if (pthread_create(&th[i], NULL, tb_thread, NULL) != 0)
            return 1;
    for (i = 0; i < sess; i++)
        pthread_join(th[i], NULL);
    el = tb_now() - t0;
    getrusage(RUSAGE_SELF, &ru);
    cpu = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
        (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
    printf("sent=%ld accepted=%ld errors=%ld conns=%ld resumed=%ld "
        "elapsed_s=%.3f msgs_per_s=%.1f conns_per_s=%.1f cpu_s=%.3f "
        "timed_out=%d\n", atomic_load(&tb_sent), atomic_load(&tb_ok),
        atomic_load(&tb_err), atomic_load(&tb_conns),
        atomic_load(&tb_resumed), el, atomic_load(&tb_ok) / el,
        atomic_load(&tb_conns) / el, cpu, atomic_load(&tb_timed_out));
    SSL_CTX_free(tb_ctx);
    free(tb_body);
    return atomic_load(&tb_timed_out) ? 2 : 0;
}
