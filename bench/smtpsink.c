/*
 * smtpsink.c - benchmark SMTP sink: accepts and discards mail, counts it.
 *
 * PURPOSE   The far end of `make bench`: mtad and Postfix relay to it, and
 *           the harness counts end-to-end deliveries from its counters.
 *           Event-driven (one epoll loop per thread, threads share the
 *           listening socket with EPOLLEXCLUSIVE), PIPELINING (all complete
 *           commands in a read are answered with one write), CHUNKING/BDAT.
 *           It can answer a chosen share of messages with 4xx or 5xx and
 *           delay the end-of-data reply, because a sink that always says 250
 *           at once hides queue behaviour.  With -C/-K it offers STARTTLS
 *           (the TLS rows of the bench, where the MTA is the TLS client):
 *           the handshake runs in the same non-blocking loop, TLS 1.3
 *           tickets and TLS 1.2 session ids are on (one SSL_CTX for all
 *           threads, so a session made on one thread resumes on another),
 *           and the counters say how many sessions were TLS and resumed.
 * CONTRACT  smtpsink [-l ADDR:PORT] [-p PORTFILE] [-c COUNTFILE] [-i MS]
 *                    [-4 PCT] [-5 PCT] [-d MS] [-j THREADS] [-F FILE]
 *                    [-C CERT -K KEY]...
 *           Port 0 picks a free port; it is printed ("port=N") and written
 *           to PORTFILE.  Counters (msgs bytes rcpts tempfail permfail conns
 *           tls tls_resumed tls_failed) are written as one "key=value ..."
 *           line to COUNTFILE every MS ms
 *           (atomically, by rename) and on exit; SIGUSR1 prints them to
 *           stdout, SIGTERM/SIGINT print them and exit 0.  "msgs" counts
 *           only messages answered 250.  With -F FILE, SIGHUP re-reads the
 *           shares and the delay from FILE ("4xx=PCT 5xx=PCT delay=MS"), so
 *           a harness can change them without dropping any connection.
 * FAILURE   A broken connection is closed and counted nowhere else; start-up
 *           errors exit 1 with a message on stderr.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#define SINK_INBUF   (128 * 1024)   /* big reads: one per wake-up */
#define SINK_OUTBUF  8192
#define SINK_MAXLINE 4096
#define SINK_THREADS 8
#define SINK_MAXCERTS 4             /* -C/-K pairs: one per key type */

/* C_STARTTLS: the 220 to STARTTLS is being written, then the handshake
 * (C_TLSHS) starts on the same socket. */
enum cstate { C_CMD, C_DATA, C_BDAT, C_WAIT, C_QUIT, C_STARTTLS, C_TLSHS };

struct conn {
    int          fd;
    SSL         *ssl;               /* set from STARTTLS on */
    enum cstate  st;
    bool         mail, want_out;
    bool         more;              /* input left unparsed: output was full */
    int          nrcpt;
    int          dmatch;            /* chars of "\r\n.\r\n" matched so far */
    uint64_t     msgbytes;
    uint64_t     bdat_left;
    bool         bdat_last;
    size_t       inlen;
    size_t       outlen, outoff;
    uint64_t     due_ns;            /* C_WAIT: when the delayed reply goes */
    char         pending[128];      /* C_WAIT: the delayed reply */
    struct conn *tnext;
    char         out[SINK_OUTBUF];
    char        *in;                /* SINK_INBUF, allocated on accept */
};

struct counters {
    _Atomic uint64_t msgs, bytes, rcpts, tempfail, permfail, conns;
    _Atomic uint64_t tls, tls_resumed, tls_failed;
};

struct worker {
    int              ep;
    int              lfd;
    pthread_t        tid;
    uint64_t         rng;
    struct conn     *thead, *ttail; /* delayed replies, FIFO = due order */
    struct counters  c;
};

static struct {
    _Atomic int   pct4, pct5;       /* changed on SIGHUP with -F */
    _Atomic uint64_t delay_ns;
    const char   *sharefile;
    const char   *countfile;
    uint64_t      interval_ns;
    int           nthreads;
    SSL_CTX      *tls;              /* NULL: STARTTLS not offered */
    struct worker w[SINK_THREADS];
} g = { .interval_ns = 100000000ull, .nthreads = 1 };

static volatile sig_atomic_t sig_term, sig_usr1, sig_hup;

static void on_signal(int s)
{
    if (s == SIGUSR1)
        sig_usr1 = 1;
    else if (s == SIGHUP)
        sig_hup = 1;
    else
        sig_term = 1;
}

/* -F FILE: "4xx=PCT 5xx=PCT delay=MS" (any order, missing keys = 0). */
static void read_sharefile(void)
{
    char buf[256];
    FILE *f = fopen(g.sharefile, "r");
    if (!f) {
        fprintf(stderr, "smtpsink: cannot read %s: %s\n", g.sharefile, strerror(errno));
        return;
    }
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p4 = strstr(buf, "4xx="), *p5 = strstr(buf, "5xx="), *pd = strstr(buf, "delay=");
    int v4 = p4 ? atoi(p4 + 4) : 0, v5 = p5 ? atoi(p5 + 4) : 0;
    long d = pd ? atol(pd + 6) : 0;
    if (v4 < 0 || v5 < 0 || v4 + v5 > 100 || d < 0) {
        fprintf(stderr, "smtpsink: %s: bad shares, kept the old ones\n", g.sharefile);
        return;
    }
    g.pct4 = v4;
    g.pct5 = v5;
    g.delay_ns = (uint64_t)d * 1000000ull;
    printf("shares: 4xx=%d 5xx=%d delay=%ld\n", v4, v5, d);
    fflush(stdout);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static void add(_Atomic uint64_t *c, uint64_t v)
{
    atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

static int format_counters(char *buf, size_t sz)
{
    uint64_t v[9] = { 0 };
    for (int i = 0; i < g.nthreads; i++) {
        struct counters *c = &g.w[i].c;
        v[0] += atomic_load_explicit(&c->msgs, memory_order_relaxed);
        v[1] += atomic_load_explicit(&c->bytes, memory_order_relaxed);
        v[2] += atomic_load_explicit(&c->rcpts, memory_order_relaxed);
        v[3] += atomic_load_explicit(&c->tempfail, memory_order_relaxed);
        v[4] += atomic_load_explicit(&c->permfail, memory_order_relaxed);
        v[5] += atomic_load_explicit(&c->conns, memory_order_relaxed);
        v[6] += atomic_load_explicit(&c->tls, memory_order_relaxed);
        v[7] += atomic_load_explicit(&c->tls_resumed, memory_order_relaxed);
        v[8] += atomic_load_explicit(&c->tls_failed, memory_order_relaxed);
    }
    return snprintf(buf, sz, "msgs=%" PRIu64 " bytes=%" PRIu64 " rcpts=%" PRIu64
                    " tempfail=%" PRIu64 " permfail=%" PRIu64 " conns=%" PRIu64
                    " tls=%" PRIu64 " tls_resumed=%" PRIu64 " tls_failed=%" PRIu64 "\n",
                    v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]);
}

/* Write the counters to COUNTFILE through a temporary file and rename, so
 * a reader never sees half a line. */
static void write_countfile(void)
{
    char line[256], tmp[4096];
    if (!g.countfile)
        return;
    int n = format_counters(line, sizeof line);
    snprintf(tmp, sizeof tmp, "%s.tmp", g.countfile);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return;
    ssize_t w = write(fd, line, (size_t)n);
    close(fd);
    if (w == n)
        rename(tmp, g.countfile);
}

static void conn_close(struct worker *w, struct conn *c)
{
    epoll_ctl(w->ep, EPOLL_CTL_DEL, c->fd, NULL);
    if (c->ssl) {
        /* close_notify once, without waiting for the peer's: OpenSSL keeps
         * a TLS 1.2 session resumable only after a shutdown was sent. */
        if (c->st != C_TLSHS)
            (void)SSL_shutdown(c->ssl);
        SSL_free(c->ssl);
        c->ssl = NULL;
        ERR_clear_error();
    }
    close(c->fd);
    /* A connection waiting for its delayed reply stays on the timer list;
     * it is freed there (fd = -1 marks it dead). */
    if (c->st == C_WAIT) {
        c->fd = -1;
        return;
    }
    free(c->in);
    free(c);
}

/* Interest follows state: output pending -> EPOLLOUT; reading only while
 * not parked on a delayed reply (level-triggered input would spin). */
static void arm(struct worker *w, struct conn *c)
{
    struct epoll_event ev = { .events = 0, .data.ptr = c };
    if (c->want_out)
        ev.events |= EPOLLOUT;
    else if (c->st != C_WAIT)
        ev.events |= EPOLLIN;
    epoll_ctl(w->ep, EPOLL_CTL_MOD, c->fd, &ev);
}

static void reply(struct conn *c, const char *s)
{
    size_t n = strlen(s);
    if (c->outlen + n > sizeof c->out)
        return;                      /* cannot happen: flushed per read */
    memcpy(c->out + c->outlen, s, n);
    c->outlen += n;
}

/* Flush the output; returns -1 when the connection is dead, 0 when all was
 * written, 1 when some remains (EPOLLOUT armed). */
/* Plain or TLS I/O with read(2)/write(2)'s conventions: -1 with errno
 * EAGAIN when it would block (either direction: TLS 1.3 after the handshake
 * needs no write to read here, so level-triggered epoll on the wanted
 * direction is enough), -1 with EIO on a TLS error, 0 at EOF. */
static ssize_t tls_io_result(struct conn *c, int r)
{
    if (r > 0)
        return r;
    switch (SSL_get_error(c->ssl, r)) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:
        errno = EAGAIN;
        return -1;
    case SSL_ERROR_ZERO_RETURN:
        return 0;
    default:
        ERR_clear_error();
        errno = EIO;
        return -1;
    }
}

static ssize_t conn_read(struct conn *c, void *p, size_t n)
{
    if (!c->ssl)
        return read(c->fd, p, n);
    return tls_io_result(c, SSL_read(c->ssl, p, n > INT32_MAX ? INT32_MAX : (int)n));
}

static ssize_t conn_write(struct conn *c, const void *p, size_t n)
{
    if (!c->ssl)
        return write(c->fd, p, n);
    return tls_io_result(c, SSL_write(c->ssl, p, (int)n));
}

static int flush_out(struct worker *w, struct conn *c)
{
    while (c->outoff < c->outlen) {
        ssize_t n = conn_write(c, c->out + c->outoff, c->outlen - c->outoff);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN) {
                if (!c->want_out) {
                    c->want_out = true;
                    arm(w, c);
                }
                return 1;
            }
            return -1;
        }
        c->outoff += (size_t)n;
    }
    c->outlen = c->outoff = 0;
    if (c->want_out) {
        c->want_out = false;
        arm(w, c);
    }
    return 0;
}

/* The reply for a finished message: 250, or the chosen share of 4xx/5xx. */
static const char *message_verdict(struct worker *w, struct conn *c)
{
    int r = (int)(rng_next(&w->rng) % 10000);
    if (r < g.pct4 * 100) {
        add(&w->c.tempfail, 1);
        return "451 4.3.0 sink: temporary failure (chosen)\r\n";
    }
    if (r < (g.pct4 + g.pct5) * 100) {
        add(&w->c.permfail, 1);
        return "554 5.3.0 sink: rejected (chosen)\r\n";
    }
    add(&w->c.msgs, 1);
    add(&w->c.bytes, c->msgbytes);
    add(&w->c.rcpts, (uint64_t)c->nrcpt);
    return "250 2.0.0 Ok: queued\r\n";
}

/* A message is complete: answer now, or park the connection until the
 * delay has passed (it reads nothing meanwhile, as a slow server would). */
static void message_done(struct worker *w, struct conn *c)
{
    const char *v = message_verdict(w, c);
    c->mail = false;
    c->nrcpt = 0;
    c->msgbytes = 0;
    if (!g.delay_ns) {
        c->st = C_CMD;
        reply(c, v);
        return;
    }
    snprintf(c->pending, sizeof c->pending, "%s", v);
    c->st = C_WAIT;
    c->due_ns = now_ns() + g.delay_ns;
    c->tnext = NULL;
    if (w->ttail)
        w->ttail->tnext = c;
    else
        w->thead = c;
    w->ttail = c;
    arm(w, c);
}

static bool verb_is(const char *line, size_t len, const char *verb)
{
    size_t n = strlen(verb);
    return len >= n && strncasecmp(line, verb, n) == 0 &&
           (len == n || line[n] == ' ');
}

static void command(struct conn *c, char *line, size_t len)
{
    while (len && (line[len - 1] == '\r' || line[len - 1] == '\n'))
        len--;
    if (verb_is(line, len, "EHLO") || verb_is(line, len, "LHLO")) {
        reply(c, "250-smtpsink\r\n250-PIPELINING\r\n250-SIZE 1073741824\r\n"
                 "250-8BITMIME\r\n250-CHUNKING\r\n250-ENHANCEDSTATUSCODES\r\n");
        reply(c, g.tls && !c->ssl ? "250-STARTTLS\r\n250 SMTPUTF8\r\n"
                                  : "250 SMTPUTF8\r\n");
    } else if (verb_is(line, len, "STARTTLS")) {
        if (!g.tls || c->ssl) {
            reply(c, c->ssl ? "503 5.5.1 TLS already active\r\n"
                            : "502 5.5.1 STARTTLS not offered\r\n");
            return;
        }
        c->mail = false;
        c->nrcpt = 0;
        reply(c, "220 2.0.0 Ready to start TLS\r\n");
        c->st = C_STARTTLS;          /* process() stops: nothing is read on */
    } else if (verb_is(line, len, "HELO")) {
        reply(c, "250 smtpsink\r\n");
    } else if (len >= 10 && strncasecmp(line, "MAIL FROM:", 10) == 0) {
        c->mail = true;
        c->nrcpt = 0;
        reply(c, "250 2.1.0 Ok\r\n");
    } else if (len >= 8 && strncasecmp(line, "RCPT TO:", 8) == 0) {
        if (!c->mail) {
            reply(c, "503 5.5.1 need MAIL\r\n");
            return;
        }
        c->nrcpt++;
        reply(c, "250 2.1.5 Ok\r\n");
    } else if (verb_is(line, len, "DATA")) {
        if (!c->nrcpt) {
            reply(c, "503 5.5.1 need RCPT\r\n");
            return;
        }
        c->st = C_DATA;
        c->dmatch = 2;               /* ".\r\n" at the very start ends it */
        c->msgbytes = 0;
        reply(c, "354 End data with <CR><LF>.<CR><LF>\r\n");
    } else if (verb_is(line, len, "BDAT")) {
        char *end = NULL;
        unsigned long long n = len >= 6 ? strtoull(line + 5, &end, 10) : 0;
        if (len < 6 || end == line + 5) {
            reply(c, "501 5.5.4 BDAT size\r\n");
            return;
        }
        while (*end == ' ')
            end++;
        c->bdat_left = n;
        c->bdat_last = strncasecmp(end, "LAST", 4) == 0;
        c->st = C_BDAT;
    } else if (verb_is(line, len, "RSET")) {
        c->mail = false;
        c->nrcpt = 0;
        c->msgbytes = 0;
        reply(c, "250 2.0.0 Ok\r\n");
    } else if (verb_is(line, len, "NOOP")) {
        reply(c, "250 2.0.0 Ok\r\n");
    } else if (verb_is(line, len, "QUIT")) {
        reply(c, "221 2.0.0 Bye\r\n");
        c->st = C_QUIT;
    } else {
        reply(c, "500 5.5.2 command not recognized\r\n");
    }
}

/* Scan DATA bytes for CRLF.CRLF; returns bytes consumed (up to and
 * including the terminator, or all of them). */
static size_t scan_data(struct worker *w, struct conn *c, const char *p, size_t n)
{
    static const char term[] = "\r\n.\r\n";
    size_t i = 0;
    while (i < n) {
        if (c->dmatch == 0) {
            const char *cr = memchr(p + i, '\r', n - i);
            if (!cr)
                break;
            i = (size_t)(cr - p) + 1;
            c->dmatch = 1;
            continue;
        }
        if (p[i] == term[c->dmatch]) {
            i++;
            if (++c->dmatch == 5) {
                /* the ".\r\n" after the last CRLF is not message content;
                 * part of it may have been counted by an earlier read */
                c->msgbytes += i;
                c->msgbytes -= 3;
                message_done(w, c);
                return i;
            }
        } else {
            c->dmatch = (p[i] == '\r') ? 1 : 0;
            i++;
        }
    }
    c->msgbytes += n;
    return n;
}

/* Consume what is in c->in; leaves an incomplete command line in place. */
static void process(struct worker *w, struct conn *c)
{
    size_t off = 0;
    c->more = false;
    while (off < c->inlen && (c->st == C_CMD || c->st == C_DATA || c->st == C_BDAT)) {
        char *p = c->in + off;
        size_t n = c->inlen - off;
        if (c->outlen > SINK_OUTBUF - 512) {
            c->more = true;          /* let the replies go first */
            break;
        }
        if (c->st == C_DATA) {
            off += scan_data(w, c, p, n);
        } else if (c->st == C_BDAT) {
            size_t take = n < c->bdat_left ? n : (size_t)c->bdat_left;
            c->bdat_left -= take;
            c->msgbytes += take;
            off += take;
            if (c->bdat_left == 0) {
                if (c->bdat_last) {
                    message_done(w, c);
                } else {
                    c->st = C_CMD;
                    reply(c, "250 2.0.0 chunk ok\r\n");
                }
            }
        } else {
            char *nl = memchr(p, '\n', n);
            if (!nl) {
                if (n > SINK_MAXLINE) {
                    reply(c, "500 5.5.2 line too long\r\n");
                    off = c->inlen;
                }
                break;
            }
            size_t len = (size_t)(nl - p) + 1;
            command(c, p, len);
            off += len;
            if (c->st == C_BDAT && c->bdat_left == 0) {
                /* "BDAT 0 LAST" */
                if (c->bdat_last)
                    message_done(w, c);
                else {
                    c->st = C_CMD;
                    reply(c, "250 2.0.0 chunk ok\r\n");
                }
            }
        }
    }
    if (off) {
        memmove(c->in, c->in + off, c->inlen - off);
        c->inlen -= off;
    }
}

static void on_readable(struct worker *w, struct conn *c);

/* Drive the server handshake one step; on success the session starts over
 * (RFC 3207: the client says EHLO again) and the input is read on. */
static void tls_step(struct worker *w, struct conn *c)
{
    int r = SSL_do_handshake(c->ssl);
    if (r == 1) {
        add(&w->c.tls, 1);
        if (SSL_session_reused(c->ssl))
            add(&w->c.tls_resumed, 1);
        c->st = C_CMD;
        c->mail = false;
        c->nrcpt = 0;
        if (c->want_out) {
            c->want_out = false;
            arm(w, c);
        }
        on_readable(w, c);
        return;
    }
    switch (SSL_get_error(c->ssl, r)) {
    case SSL_ERROR_WANT_READ:
        if (c->want_out) {
            c->want_out = false;
            arm(w, c);
        }
        return;
    case SSL_ERROR_WANT_WRITE:
        if (!c->want_out) {
            c->want_out = true;
            arm(w, c);
        }
        return;
    default:
        add(&w->c.tls_failed, 1);
        conn_close(w, c);
    }
}

/* The 220 to STARTTLS has left: what the client pipelined behind STARTTLS
 * is dropped (RFC 3207 section 4.2), the handshake starts. */
static void tls_start(struct worker *w, struct conn *c)
{
    c->inlen = 0;
    c->ssl = SSL_new(g.tls);
    if (!c->ssl || SSL_set_fd(c->ssl, c->fd) != 1) {
        add(&w->c.tls_failed, 1);
        conn_close(w, c);
        return;
    }
    SSL_set_accept_state(c->ssl);
    c->st = C_TLSHS;
    tls_step(w, c);
}

static void on_readable(struct worker *w, struct conn *c)
{
    for (;;) {
        if (c->st == C_TLSHS) {
            tls_step(w, c);
            return;
        }
        if (c->st == C_WAIT || c->st == C_QUIT)
            return;
        size_t room = SINK_INBUF - c->inlen;
        bool drained = false;
        ssize_t n = 0;
        if (room) {
            n = conn_read(c, c->in + c->inlen, room);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && errno == EAGAIN) {
                drained = true;
                n = 0;
            } else if (n <= 0) {
                conn_close(w, c);    /* EOF or error */
                return;
            }
        }
        c->inlen += (size_t)n;
        process(w, c);
        int f = flush_out(w, c);
        if (f < 0 || (f == 0 && c->st == C_QUIT)) {
            conn_close(w, c);
            return;
        }
        if (f > 0)
            return;                  /* wait for EPOLLOUT */
        if (c->st == C_STARTTLS) {
            tls_start(w, c);
            return;
        }
        if (c->more)
            continue;                /* replies went out; parse the rest */
        /* Level-triggered: epoll says when more comes - but not for bytes
         * OpenSSL has already taken off the socket, so TLS reads on until
         * it would block. */
        if (drained || (!c->ssl && (size_t)n < room))
            return;
    }
}

static void on_writable(struct worker *w, struct conn *c)
{
    int f = flush_out(w, c);
    if (f < 0 || (f == 0 && c->st == C_QUIT)) {
        conn_close(w, c);
        return;
    }
    if (f == 0 && c->st == C_STARTTLS)
        tls_start(w, c);
    else if (f == 0)
        on_readable(w, c);
}

static void run_timers(struct worker *w, uint64_t now)
{
    while (w->thead && w->thead->due_ns <= now) {
        struct conn *c = w->thead;
        w->thead = c->tnext;
        if (!w->thead)
            w->ttail = NULL;
        if (c->fd < 0) {             /* closed while waiting */
            free(c->in);
            free(c);
            continue;
        }
        c->st = C_CMD;
        arm(w, c);
        reply(c, c->pending);
        process(w, c);
        if (flush_out(w, c) < 0 || (c->st == C_QUIT && !c->outlen)) {
            conn_close(w, c);
            continue;
        }
        if (c->st == C_STARTTLS && !c->outlen) {
            tls_start(w, c);
            continue;
        }
        if (!c->want_out)
            on_readable(w, c);
    }
}

static void on_accept(struct worker *w)
{
    for (;;) {
        int fd = accept4(w->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;                  /* EAGAIN, or EMFILE: retried next wake */
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct conn *c = calloc(1, sizeof *c);
        char *in = malloc(SINK_INBUF);
        if (!c || !in) {
            free(c);
            free(in);
            close(fd);
            continue;
        }
        c->fd = fd;
        c->in = in;
        c->st = C_CMD;
        add(&w->c.conns, 1);
        struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
        epoll_ctl(w->ep, EPOLL_CTL_ADD, fd, &ev);
        reply(c, "220 smtpsink ESMTP\r\n");
        if (flush_out(w, c) < 0)
            conn_close(w, c);
    }
}

static void print_counters(void)
{
    char line[256];
    format_counters(line, sizeof line);
    fputs(line, stdout);
    fflush(stdout);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct epoll_event evs[256];
    bool leader = (w == &g.w[0]);
    uint64_t next_file = now_ns() + g.interval_ns;
    while (!sig_term) {
        int timeout = 100;
        if (w->thead) {
            uint64_t now = now_ns();
            int ms = w->thead->due_ns > now
                         ? (int)((w->thead->due_ns - now + 999999) / 1000000) : 0;
            if (ms < timeout)
                timeout = ms;
        }
        int n = epoll_wait(w->ep, evs, 256, timeout);
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == NULL) {
                on_accept(w);
                continue;
            }
            struct conn *c = evs[i].data.ptr;
            if (c->st == C_WAIT && (evs[i].events & (EPOLLERR | EPOLLHUP)))
                conn_close(w, c);
            else if (c->st == C_WAIT && !(evs[i].events & EPOLLOUT))
                continue;
            else if (c->want_out && (evs[i].events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
                on_writable(w, c);
            else if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
                on_readable(w, c);
        }
        uint64_t now = now_ns();
        if (w->thead)
            run_timers(w, now);
        if (leader) {
            if (sig_usr1) {
                sig_usr1 = 0;
                print_counters();
            }
            if (sig_hup) {
                sig_hup = 0;
                if (g.sharefile)
                    read_sharefile();
            }
            if (now >= next_file) {
                write_countfile();
                next_file = now + g.interval_ns;
            }
        }
    }
    return NULL;
}

static int listen_on(const char *spec, int *port_out)
{
    char host[256];
    snprintf(host, sizeof host, "%s", spec);
    char *colon = strrchr(host, ':');
    if (!colon)
        return -1;
    *colon = '\0';
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1)) };
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return -1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 4096) < 0) {
        close(fd);
        return -1;
    }
    socklen_t sl = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    *port_out = ntohs(sa.sin_port);
    return fd;
}

static void usage(void)
{
    fprintf(stderr, "usage: smtpsink [-l ADDR:PORT] [-p PORTFILE] [-c COUNTFILE] [-i MS]\n"
                    "                [-4 PCT] [-5 PCT] [-d MS] [-j THREADS] [-F FILE]\n"
                    "                [-C CERT -K KEY]...\n");
    exit(1);
}

/* One server context for every thread: its ticket key and its session id
 * cache are shared, so a client resumes whichever thread takes it.  One
 * TLS 1.3 ticket per handshake (a client keeps the newest anyway); TLS 1.2
 * session ids under a fixed context. */
static SSL_CTX *tls_context(const char **certs, const char **keys, int n)
{
    static const unsigned char sid_ctx[] = "smtpsink";
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx)
        return NULL;
    (void)SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
                          SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
    (void)SSL_CTX_set_session_id_context(ctx, sid_ctx, sizeof sid_ctx - 1);
    (void)SSL_CTX_set_num_tickets(ctx, 1);
    SSL_CTX_set_read_ahead(ctx, 1);     /* a read per flight, not per record */
    /* No renegotiation: a read then never needs a write (conn_read's
     * EAGAIN waits for input only). */
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION);
    for (int i = 0; i < n; i++) {
        if (SSL_CTX_use_certificate_chain_file(ctx, certs[i]) != 1 ||
            SSL_CTX_use_PrivateKey_file(ctx, keys[i], SSL_FILETYPE_PEM) != 1 ||
            SSL_CTX_check_private_key(ctx) != 1) {
            fprintf(stderr, "smtpsink: cannot load %s / %s: ", certs[i], keys[i]);
            ERR_print_errors_fp(stderr);
            SSL_CTX_free(ctx);
            return NULL;
        }
    }
    return ctx;
}

int main(int argc, char **argv)
{
    const char *spec = "127.0.0.1:0", *portfile = NULL;
    const char *certs[SINK_MAXCERTS], *keys[SINK_MAXCERTS];
    int ncert = 0, nkey = 0;
    int opt;
    while ((opt = getopt(argc, argv, "l:p:c:i:4:5:d:j:F:C:K:")) != -1) {
        switch (opt) {
        case 'l': spec = optarg; break;
        case 'p': portfile = optarg; break;
        case 'c': g.countfile = optarg; break;
        case 'i': g.interval_ns = strtoull(optarg, NULL, 10) * 1000000ull; break;
        case '4': g.pct4 = atoi(optarg); break;
        case '5': g.pct5 = atoi(optarg); break;
        case 'd': g.delay_ns = strtoull(optarg, NULL, 10) * 1000000ull; break;
        case 'j': g.nthreads = atoi(optarg); break;
        case 'F': g.sharefile = optarg; break;
        case 'C':
            if (ncert == SINK_MAXCERTS)
                usage();
            certs[ncert++] = optarg;
            break;
        case 'K':
            if (nkey == SINK_MAXCERTS)
                usage();
            keys[nkey++] = optarg;
            break;
        default: usage();
        }
    }
    if (g.nthreads < 1 || g.nthreads > SINK_THREADS || g.pct4 < 0 || g.pct5 < 0 ||
        g.pct4 + g.pct5 > 100 || g.interval_ns == 0 || ncert != nkey)
        usage();
    if (ncert && !(g.tls = tls_context(certs, keys, ncert)))
        return 1;
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = { .sa_handler = on_signal };
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    if (g.sharefile)
        read_sharefile();

    int port = 0;
    int lfd = listen_on(spec, &port);
    if (lfd < 0) {
        fprintf(stderr, "smtpsink: cannot listen on %s: %s\n", spec, strerror(errno));
        return 1;
    }
    if (portfile) {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", portfile);
        FILE *f = fopen(tmp, "w");
        if (!f || fprintf(f, "%d\n", port) < 0 || fclose(f) != 0 || rename(tmp, portfile) < 0) {
            fprintf(stderr, "smtpsink: cannot write %s\n", portfile);
            return 1;
        }
    }
    printf("port=%d\n", port);
    fflush(stdout);
    write_countfile();

    for (int i = 0; i < g.nthreads; i++) {
        struct worker *w = &g.w[i];
        w->lfd = lfd;
        w->rng = 0x9E3779B97F4A7C15ull ^ ((uint64_t)getpid() << 16) ^ (uint64_t)(i + 1);
        w->ep = epoll_create1(EPOLL_CLOEXEC);
        struct epoll_event ev = { .events = EPOLLIN | EPOLLEXCLUSIVE, .data.ptr = NULL };
        if (w->ep < 0 || epoll_ctl(w->ep, EPOLL_CTL_ADD, lfd, &ev) < 0) {
            fprintf(stderr, "smtpsink: epoll: %s\n", strerror(errno));
            return 1;
        }
    }
    /* Signals go to the main thread only: the others block them. */
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, &old);
    for (int i = 1; i < g.nthreads; i++)
        pthread_create(&g.w[i].tid, NULL, worker_main, &g.w[i]);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    worker_main(&g.w[0]);
    for (int i = 1; i < g.nthreads; i++)
        pthread_join(g.w[i].tid, NULL);
    write_countfile();
    print_counters();
    SSL_CTX_free(g.tls);
    return 0;
}
