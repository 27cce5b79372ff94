/*
 * smtpblast.c - benchmark SMTP load generator.
 *
 * PURPOSE   The near end of `make bench`: N concurrent sessions send M
 *           messages in total, K per connection, each SIZE bytes, to one
 *           server, and report what was accepted, how fast, and the latency
 *           from end-of-data sent to the reply received.  Event-driven: one
 *           epoll loop per thread (-j), non-blocking sockets.  Uses
 *           PIPELINING when the server offers it (MAIL, RCPT and DATA - or
 *           BDAT with the body - in one write), BDAT with -B when the server
 *           offers CHUNKING.  -R RATE paces the transactions to a fixed
 *           offered rate (msgs/s, summed over all sessions): message n
 *           starts (its MAIL is sent) no sooner than n/RATE s after the
 *           start plus 200 ms (the sessions' first connections are made
 *           meanwhile, not in the way of the first messages), so a
 *           latency can be measured below saturation instead
 *           of only in a closed loop (Little's law).  With -i it instead opens and holds X idle
 *           connections (greeting read, nothing sent) until the time limit
 *           or SIGTERM, to load a server with idle sessions.
 * CONTRACT  smtpblast -s ADDR:PORT [-b SRC] [-c SESSIONS] [-m MESSAGES]
 *                     [-k PER_CONN] [-z SIZE] [-r RCPTS] [-B] [-P] [-j THREADS]
 *                     [-R RATE] [-T SECS]
 *           smtpblast -s ADDR:PORT [-b SRC] -i IDLE [-T SECS] [-j THREADS]
 *           -k 0: every session keeps its connection for all its messages;
 *           -P: never pipeline; -B: BDAT instead of DATA (when offered);
 *           -b: connect from source address SRC (e.g. 127.0.0.2).
 *           Prints one "key=value ..." line on stdout at the end: sent
 *           accepted tempfail permfail errors conns elapsed_s msgs_per_s
 *           mb_per_s p50_us p99_us max_us timed_out.  Idle mode prints
 *           "idle_established=N" as soon as the connections are up, then
 *           the final line.  Exit 0 when every message was answered (any
 *           code), 2 when the time limit stopped the run, 1 on usage error.
 * FAILURE   A connection that breaks is counted in errors (its message, if
 *           one was in flight, too) and the session reconnects while
 *           messages remain; more than max(1000, M) connection errors stop
 *           the run.  Every loop is bounded by M and by the time limit.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define BL_INBUF      4096
#define BL_CMDBUF     4096
#define BL_THREADS    16
#define BL_HBUCKETS   1344
#define BL_PACE_LEAD_NS 200000000ull /* -R: first slot after the connects */
#define BL_MAXCONNECT 256           /* connects in flight per thread (idle mode) */

enum phase {
    P_CONNECT, P_GREET, P_EHLO,
    P_ENV,                          /* MAIL/RCPT/(DATA|BDAT) replies pending */
    P_BODY,                         /* DATA body sent, final reply pending */
    P_QUIT, P_IDLE, P_DONE,
    P_WAIT                          /* -R: the next MAIL waits for its slot */
};

struct sess {
    int          fd;
    enum phase   ph;
    bool         pipelining, chunking;
    bool         claimed;           /* holds a message not yet sent */
    bool         want_out, eod_in_out;
    int          nreply;            /* replies received in this phase */
    int          msgs_on_conn;
    bool         tx_failed;
    int          fail_code;         /* first non-2xx reply of the transaction */
    uint64_t     t_eod;
    uint64_t     wake_ns;           /* P_WAIT: when its slot comes */
    bool         slotted;           /* the message holds its slot already */
    size_t       inlen;
    size_t       cmdlen, cmdoff;
    const char  *body;
    size_t       bodylen, bodyoff;
    struct worker *w;
    char         in[BL_INBUF];
    char         cmd[BL_CMDBUF];
};

struct worker {
    pthread_t     tid;
    int           ep;
    struct sess  *s;
    int           ns;
    int           live;             /* sessions not P_DONE */
    int           connecting;       /* idle mode: connects in flight */
    int           next_idle;        /* idle mode: next session to connect */
    bool          ramp_done;
    uint64_t      accepted, tempfail, permfail, errors, conns, bytes;
    uint64_t      idle_up, idle_lost;
    uint64_t      last_reply_ns;
    uint64_t      lat_max;
    uint64_t      hist[BL_HBUCKETS];
};

static struct {
    struct sockaddr_in addr;
    struct sockaddr_in src;         /* -b: source address, else the kernel's */
    int      sessions, threads, rcpts;
    uint64_t messages, per_conn, size;
    bool     use_bdat, no_pipelining;
    double   rate;                  /* -R: msgs/s offered, 0 = closed loop */
    _Atomic uint64_t slots;         /* -R: transactions given a start time */
    int      idle;
    uint64_t deadline_ns, start_ns;
    char    *data_body;             /* message + ".\r\n" */
    size_t   data_len;
    size_t   bdat_len;              /* message without the terminator */
    _Atomic uint64_t claimed;
    _Atomic uint64_t conn_errors;
    _Atomic int ramps_done;
    int      idle_reported;
    struct worker w[BL_THREADS];
} g = { .sessions = 1, .threads = 1, .rcpts = 1, .messages = 1, .per_conn = 1,
        .size = 1024 };

static volatile sig_atomic_t stop_flag;

static void on_signal(int s)
{
    (void)s;
    stop_flag = 1;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Log-linear histogram of microseconds: exact below 64, then 32 sub-buckets
 * per power of two (about 3% resolution). */
static int hist_index(uint64_t v)
{
    if (v < 64)
        return (int)v;
    int msb = 63 - __builtin_clzll(v);
    int k = msb - 5;
    int idx = k * 32 + (int)(v >> k);
    return idx < BL_HBUCKETS ? idx : BL_HBUCKETS - 1;
}

static uint64_t hist_value(int idx)
{
    if (idx < 64)
        return (uint64_t)idx;
    int k = idx / 32 - 1;
    uint64_t top = (uint64_t)(idx - k * 32);
    return (top << k) + ((1ull << k) >> 1);     /* middle of the bucket */
}

static bool claim_message(void)
{
    uint64_t n = atomic_fetch_add_explicit(&g.claimed, 1, memory_order_relaxed);
    return n < g.messages;
}

static void arm(struct sess *s)
{
    struct epoll_event ev = { .events = EPOLLIN, .data.ptr = s };
    if (s->want_out || s->ph == P_CONNECT)
        ev.events |= EPOLLOUT;
    epoll_ctl(s->w->ep, EPOLL_CTL_MOD, s->fd, &ev);
}

static void sess_close(struct sess *s)
{
    if (s->fd >= 0) {
        epoll_ctl(s->w->ep, EPOLL_CTL_DEL, s->fd, NULL);
        close(s->fd);
    }
    s->fd = -1;
    s->inlen = s->cmdlen = s->cmdoff = s->bodylen = s->bodyoff = 0;
    s->want_out = s->eod_in_out = false;
}

static void sess_finish(struct sess *s)
{
    if (s->ph != P_DONE) {
        s->ph = P_DONE;
        s->w->live--;
    }
}

static int sess_connect(struct sess *s)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (g.src.sin_family) {
        /* a source address of our own: fresh 4-tuples, and the kernel
         * still picks the port at connect() time */
        setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
        if (bind(fd, (struct sockaddr *)&g.src, sizeof g.src) < 0) {
            close(fd);
            return -1;
        }
    }
    if (connect(fd, (struct sockaddr *)&g.addr, sizeof g.addr) < 0 && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    s->fd = fd;
    s->ph = P_CONNECT;
    s->inlen = 0;
    s->msgs_on_conn = 0;
    s->pipelining = s->chunking = false;
    struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT, .data.ptr = s };
    epoll_ctl(s->w->ep, EPOLL_CTL_ADD, fd, &ev);
    s->w->conns++;
    return 0;
}

static void cmd_add(struct sess *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void cmd_add(struct sess *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(s->cmd + s->cmdlen, BL_CMDBUF - s->cmdlen, fmt, ap);
    va_end(ap);
    if (n > 0 && (size_t)n < BL_CMDBUF - s->cmdlen)
        s->cmdlen += (size_t)n;
}

/* Write what is queued: commands first, then the body.  Returns -1 when the
 * connection broke, 0 when everything went, 1 when EPOLLOUT is needed. */
static int sess_flush(struct sess *s)
{
    while (s->cmdoff < s->cmdlen || s->bodyoff < s->bodylen) {
        struct iovec iov[2];
        int n = 0;
        if (s->cmdoff < s->cmdlen)
            iov[n++] = (struct iovec){ s->cmd + s->cmdoff, s->cmdlen - s->cmdoff };
        if (s->bodyoff < s->bodylen)
            iov[n++] = (struct iovec){ (void *)(s->body + s->bodyoff), s->bodylen - s->bodyoff };
        ssize_t w = writev(s->fd, iov, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN) {
                if (!s->want_out) {
                    s->want_out = true;
                    arm(s);
                }
                return 1;
            }
            return -1;
        }
        size_t left = (size_t)w;
        size_t c = s->cmdlen - s->cmdoff;
        if (left >= c) {
            s->cmdoff = s->cmdlen;
            left -= c;
            s->bodyoff += left;
        } else {
            s->cmdoff += left;
        }
    }
    s->cmdlen = s->cmdoff = 0;
    s->bodylen = s->bodyoff = 0;
    if (s->eod_in_out) {
        s->eod_in_out = false;
        s->t_eod = now_ns();         /* end of data has left us */
    }
    if (s->want_out) {
        s->want_out = false;
        arm(s);
    }
    return 0;
}

static void queue_body(struct sess *s, const char *body, size_t len)
{
    s->body = body;
    s->bodylen = len;
    s->bodyoff = 0;
    s->eod_in_out = true;
}

/* Start the transaction for the message this session holds; with -R,
 * first wait for its slot (the loop starts it again at wake_ns). */
static void start_tx(struct sess *s)
{
    if (g.rate > 0 && !s->slotted) {
        uint64_t n = atomic_fetch_add_explicit(&g.slots, 1, memory_order_relaxed);
        uint64_t at = g.start_ns + BL_PACE_LEAD_NS +
            (uint64_t)((double)n * 1e9 / g.rate);
        if (now_ns() < at) {
            s->slotted = true;
            s->wake_ns = at;
            s->ph = P_WAIT;
            return;
        }
    }
    s->slotted = false;
    s->claimed = false;
    s->tx_failed = false;
    s->nreply = 0;
    s->ph = P_ENV;
    cmd_add(s, "MAIL FROM:<blast@bench.example>\r\n");
    if (!s->pipelining)
        return;                      /* one command at a time */
    for (int i = 0; i < g.rcpts; i++)
        cmd_add(s, "RCPT TO:<rcpt%d@sink.example>\r\n", i);
    if (g.use_bdat && s->chunking) {
        cmd_add(s, "BDAT %zu LAST\r\n", g.bdat_len);
        queue_body(s, g.data_body, g.bdat_len);
    } else {
        cmd_add(s, "DATA\r\n");
    }
}

static void next_or_quit(struct sess *s)
{
    bool more = (g.per_conn == 0 || (uint64_t)s->msgs_on_conn < g.per_conn);
    if (more && !stop_flag && claim_message()) {
        s->claimed = true;
        start_tx(s);
        return;
    }
    s->ph = P_QUIT;
    cmd_add(s, "QUIT\r\n");
}

static void message_result(struct sess *s, int code)
{
    struct worker *w = s->w;
    uint64_t t = now_ns();
    w->last_reply_ns = t;
    if (s->t_eod && t >= s->t_eod) {
        uint64_t us = (t - s->t_eod) / 1000;
        w->hist[hist_index(us)]++;
        if (us > w->lat_max)
            w->lat_max = us;
    }
    s->t_eod = 0;
    s->msgs_on_conn++;
    if (s->tx_failed)
        code = s->fail_code;
    if (code >= 200 && code < 300) {
        w->accepted++;
        w->bytes += g.bdat_len;
    } else if (code >= 400 && code < 500) {
        w->tempfail++;
    } else {
        w->permfail++;
    }
}

/* One final reply line (code) arrived: advance the session.  A failed
 * transaction is counted by the first failing code (a 4xx at RCPT makes the
 * message a temporary failure even when DATA then gets 554). */
static void on_reply(struct sess *s, int code)
{
    bool bdat = g.use_bdat && s->chunking;
    switch (s->ph) {
    case P_GREET:
        if (code != 220 && g.idle) {
            s->w->errors++;          /* refused: this idle slot stays empty */
            s->w->connecting--;
            s->ph = P_DONE;
            return;
        }
        if (code != 220) {
            s->w->errors++;
            atomic_fetch_add(&g.conn_errors, 1);
            s->ph = P_QUIT;
            cmd_add(s, "QUIT\r\n");
            return;
        }
        if (g.idle) {
            s->ph = P_IDLE;
            s->w->idle_up++;
            s->w->connecting--;
            return;
        }
        s->ph = P_EHLO;
        cmd_add(s, "EHLO blast.bench.example\r\n");
        return;
    case P_EHLO:
        if (code != 250) {
            s->w->errors++;
            atomic_fetch_add(&g.conn_errors, 1);
            s->ph = P_QUIT;
            cmd_add(s, "QUIT\r\n");
            return;
        }
        if (g.no_pipelining)
            s->pipelining = false;
        if (s->claimed)
            start_tx(s);
        else
            next_or_quit(s);
        return;
    case P_ENV: {
        int idx = s->nreply++;
        int last = g.rcpts + 1;      /* index of the DATA/BDAT reply */
        if (idx < last) {
            if ((code < 200 || code >= 300) && !s->tx_failed) {
                s->tx_failed = true;
                s->fail_code = code;
            }
            if (!s->pipelining) {    /* lock-step: send the next command */
                if (idx < g.rcpts)
                    cmd_add(s, "RCPT TO:<rcpt%d@sink.example>\r\n", idx);
                else if (bdat) {
                    cmd_add(s, "BDAT %zu LAST\r\n", g.bdat_len);
                    queue_body(s, g.data_body, g.bdat_len);
                } else
                    cmd_add(s, "DATA\r\n");
            }
            return;
        }
        if (bdat) {                  /* the BDAT LAST reply is the verdict */
            message_result(s, code);
            next_or_quit(s);
            return;
        }
        if (code == 354) {
            s->ph = P_BODY;
            queue_body(s, g.data_body, g.data_len);
            return;
        }
        s->t_eod = 0;
        message_result(s, s->tx_failed ? s->fail_code : code >= 400 ? code : 554);
        next_or_quit(s);
        return;
    }
    case P_BODY:
        message_result(s, code);
        next_or_quit(s);
        return;
    case P_QUIT:
        s->ph = P_DONE;              /* closed by the caller */
        return;
    default:
        s->w->errors++;
        return;
    }
}

static void ehlo_line(struct sess *s, const char *text, size_t len)
{
    if (len >= 10 && strncasecmp(text, "PIPELINING", 10) == 0)
        s->pipelining = true;
    if (len >= 8 && strncasecmp(text, "CHUNKING", 8) == 0)
        s->chunking = true;
}

static bool conn_error_limit(void)
{
    uint64_t e = atomic_load_explicit(&g.conn_errors, memory_order_relaxed);
    return e > (g.messages > 1000 ? g.messages : 1000);
}

/* A connection broke or misbehaved: count it, and reconnect if messages
 * remain (the message in flight counts as failed). */
static void sess_broken(struct sess *s)
{
    struct worker *w = s->w;
    w->errors++;
    if (g.idle) {
        if (s->ph == P_IDLE)
            w->idle_lost++, w->idle_up--;
        else
            w->connecting--;
        sess_close(s);
        sess_finish(s);
        return;
    }
    if (s->ph == P_ENV || s->ph == P_BODY)
        w->permfail++;
    sess_close(s);
    atomic_fetch_add(&g.conn_errors, 1);
    if (conn_error_limit() || stop_flag) {
        sess_finish(s);
        return;
    }
    if (!s->claimed && !claim_message()) {
        sess_finish(s);
        return;
    }
    s->claimed = true;
    if (sess_connect(s) < 0) {
        s->claimed = false;
        w->errors++;
        sess_finish(s);
    }
}

static void on_input(struct sess *s)
{
    for (;;) {
        ssize_t n = read(s->fd, s->in + s->inlen, BL_INBUF - s->inlen);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        if (n <= 0) {
            if (s->ph == P_DONE || s->ph == P_QUIT) {
                bool quit_done = s->ph == P_DONE;
                sess_close(s);
                s->ph = P_QUIT;
                if (!quit_done)
                    s->w->errors++;
                goto reconnect;
            }
            sess_broken(s);
            return;
        }
        s->inlen += (size_t)n;
        size_t off = 0;
        for (;;) {
            char *p = s->in + off;
            char *nl = memchr(p, '\n', s->inlen - off);
            if (!nl)
                break;
            size_t len = (size_t)(nl - p) + 1;
            off += len;
            if (len < 4 || p[0] < '0' || p[0] > '9') {
                sess_broken(s);
                return;
            }
            int code = (p[0] - '0') * 100 + (p[1] - '0') * 10 + (p[2] - '0');
            if (s->ph == P_EHLO && code == 250)
                ehlo_line(s, p + 4, len - 4);
            if (p[3] == '-')
                continue;            /* continuation line */
            on_reply(s, code);
            if (s->ph == P_DONE)
                break;
        }
        memmove(s->in, s->in + off, s->inlen - off);
        s->inlen -= off;
        if (s->ph == P_DONE) {
            sess_close(s);
            goto reconnect;
        }
        if (s->inlen == BL_INBUF) {  /* a reply line longer than the buffer */
            sess_broken(s);
            return;
        }
        if (sess_flush(s) < 0) {
            sess_broken(s);
            return;
        }
        if ((size_t)n < BL_INBUF)
            break;
    }
    return;
reconnect:
    /* The session ended with QUIT; a new connection if messages remain
     * (and the server has not failed too often).  Idle slots never come
     * back. */
    if (!g.idle && !stop_flag && !conn_error_limit() && (s->claimed || claim_message())) {
        s->claimed = true;
        if (sess_connect(s) == 0)
            return;
        s->claimed = false;
        s->w->errors++;
    }
    s->ph = P_QUIT;
    sess_finish(s);
}

static void on_event(struct sess *s, uint32_t ev)
{
    if (s->ph == P_CONNECT) {
        int err = 0;
        socklen_t sl = sizeof err;
        getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &sl);
        if (err || (ev & (EPOLLERR | EPOLLHUP))) {
            sess_broken(s);
            return;
        }
        s->ph = P_GREET;
        arm(s);
        if (!(ev & EPOLLIN))
            return;
    }
    if ((ev & EPOLLOUT) && s->want_out) {
        if (sess_flush(s) < 0) {
            sess_broken(s);
            return;
        }
    }
    if (ev & (EPOLLIN | EPOLLERR | EPOLLHUP))
        on_input(s);
}

/* Idle mode: keep up to BL_MAXCONNECT connects in flight until all are up. */
static void idle_ramp(struct worker *w)
{
    while (w->next_idle < w->ns && w->connecting < BL_MAXCONNECT) {
        struct sess *s = &w->s[w->next_idle++];
        if (sess_connect(s) < 0) {
            w->errors++;
            sess_finish(s);
            continue;
        }
        w->connecting++;
    }
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct epoll_event evs[512];
    w->live = w->ns;
    if (g.idle) {
        idle_ramp(w);
    } else {
        for (int i = 0; i < w->ns; i++) {
            struct sess *s = &w->s[i];
            if (!claim_message() || sess_connect(s) < 0) {
                sess_finish(s);
                continue;
            }
            s->claimed = true;
        }
    }
    while (w->live > 0 && !stop_flag) {
        uint64_t now = now_ns();
        if (now >= g.deadline_ns)
            break;
        struct timespec ts = { 0, 100 * 1000000L };
        if (g.rate > 0) {           /* the next slot of a waiting session */
            uint64_t wake = now + 100 * 1000000ull;
            for (int i = 0; i < w->ns; i++)
                if (w->s[i].ph == P_WAIT && w->s[i].wake_ns < wake)
                    wake = w->s[i].wake_ns;
            wake = wake > now ? wake - now : 0;
            ts.tv_sec = (time_t)(wake / 1000000000ull);
            ts.tv_nsec = (long)(wake % 1000000000ull);
        }
        int n = epoll_pwait2(w->ep, evs, 512, &ts, NULL);
        for (int i = 0; i < n; i++)
            on_event(evs[i].data.ptr, evs[i].events);
        if (g.rate > 0) {
            now = now_ns();
            for (int i = 0; i < w->ns; i++) {
                struct sess *s = &w->s[i];
                if (s->ph != P_WAIT || s->wake_ns > now)
                    continue;
                start_tx(s);        /* slotted: goes now */
                if (sess_flush(s) < 0)
                    sess_broken(s);
            }
        }
        if (g.idle) {
            idle_ramp(w);
            if (!w->ramp_done && w->connecting == 0 && w->next_idle == w->ns) {
                w->ramp_done = true;
                atomic_fetch_add(&g.ramps_done, 1);
            }
            if (w == &g.w[0] && !g.idle_reported &&
                atomic_load(&g.ramps_done) == g.threads) {
                uint64_t up = 0;
                for (int t = 0; t < g.threads; t++)
                    up += g.w[t].idle_up;    /* racy read; the final line is exact */
                printf("idle_established=%" PRIu64 "\n", up);
                fflush(stdout);
                g.idle_reported = 1;
            }
        }
    }
    return NULL;
}

/* Build the message: headers, then 76-character lines, exactly g.size bytes
 * (at least the headers), never a line starting with a dot. */
static void build_message(void)
{
    char hdr[512];
    int h = snprintf(hdr, sizeof hdr,
                     "From: <blast@bench.example>\r\nTo: <rcpt0@sink.example>\r\n"
                     "Subject: smtpblast benchmark message\r\n"
                     "Message-ID: <blast.%d@bench.example>\r\n\r\n", (int)getpid());
    size_t size = g.size > (uint64_t)h + 2 ? (size_t)g.size : (size_t)h + 2;
    g.data_body = malloc(size + 3);
    if (!g.data_body) {
        fprintf(stderr, "smtpblast: out of memory\n");
        exit(1);
    }
    memcpy(g.data_body, hdr, (size_t)h);
    size_t off = (size_t)h;
    while (off < size) {
        size_t left = size - off;
        size_t line = left > 78 ? 78 : left;        /* 76 + CRLF */
        if (left - line < 3 && left > 78)
            line = left - 3;         /* keep room for a last short line */
        for (size_t i = 0; i + 2 < line; i++)
            g.data_body[off + i] = (char)('a' + (off + i) % 26);
        if (line >= 2) {
            g.data_body[off + line - 2] = '\r';
            g.data_body[off + line - 1] = '\n';
        } else {
            g.data_body[off] = 'x';
        }
        off += line;
    }
    /* make sure it ends in CRLF */
    g.data_body[size - 2] = '\r';
    g.data_body[size - 1] = '\n';
    g.bdat_len = size;
    memcpy(g.data_body + size, ".\r\n", 3);
    g.data_len = size + 3;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: smtpblast -s ADDR:PORT [-b SRCADDR] [-c SESSIONS] [-m MESSAGES]\n"
            "                 [-k PER_CONN(0=all)] [-z SIZE] [-r RCPTS] [-B] [-P] [-j THREADS]\n"
            "                 [-R MSGS_PER_S] [-T SECS]\n"
            "       smtpblast -s ADDR:PORT [-b SRCADDR] -i IDLE [-T SECS] [-j THREADS]\n");
    exit(1);
}

static uint64_t parse_size(const char *s)
{
    char *end;
    uint64_t v = strtoull(s, &end, 10);
    if (*end == 'k' || *end == 'K')
        v *= 1024;
    else if (*end == 'm' || *end == 'M')
        v *= 1024 * 1024;
    return v;
}

int main(int argc, char **argv)
{
    const char *server = NULL;
    double limit_s = 60;
    int opt;
    while ((opt = getopt(argc, argv, "s:b:c:m:k:z:r:R:BPj:T:i:")) != -1) {
        switch (opt) {
        case 's': server = optarg; break;
        case 'b':
            g.src.sin_family = AF_INET;
            if (inet_pton(AF_INET, optarg, &g.src.sin_addr) != 1)
                usage();
            break;
        case 'c': g.sessions = atoi(optarg); break;
        case 'm': g.messages = strtoull(optarg, NULL, 10); break;
        case 'k': g.per_conn = strtoull(optarg, NULL, 10); break;
        case 'z': g.size = parse_size(optarg); break;
        case 'r': g.rcpts = atoi(optarg); break;
        case 'R': g.rate = atof(optarg); break;
        case 'B': g.use_bdat = true; break;
        case 'P': g.no_pipelining = true; break;
        case 'j': g.threads = atoi(optarg); break;
        case 'T': limit_s = atof(optarg); break;
        case 'i': g.idle = atoi(optarg); break;
        default: usage();
        }
    }
    if (!server || g.sessions < 1 || g.threads < 1 || g.threads > BL_THREADS ||
        g.rcpts < 1 || g.rcpts > 100 || limit_s <= 0 || g.idle < 0 ||
        !(g.rate >= 0 && g.rate <= 1e7))
        usage();
    char host[256];
    snprintf(host, sizeof host, "%s", server);
    char *colon = strrchr(host, ':');
    if (!colon)
        usage();
    *colon = '\0';
    g.addr.sin_family = AF_INET;
    g.addr.sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, host, &g.addr.sin_addr) != 1)
        usage();

    int total = g.idle ? g.idle : g.sessions;
    if (g.threads > total)
        g.threads = total;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)total + 64) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    build_message();
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = { .sa_handler = on_signal };
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    g.start_ns = now_ns();
    g.deadline_ns = g.start_ns + (uint64_t)(limit_s * 1e9);
    for (int t = 0; t < g.threads; t++) {
        struct worker *w = &g.w[t];
        w->ns = total / g.threads + (t < total % g.threads ? 1 : 0);
        w->s = calloc((size_t)w->ns, sizeof *w->s);
        w->ep = epoll_create1(EPOLL_CLOEXEC);
        if (!w->s || w->ep < 0) {
            fprintf(stderr, "smtpblast: out of memory\n");
            return 1;
        }
        for (int i = 0; i < w->ns; i++) {
            w->s[i].fd = -1;
            w->s[i].w = w;
            w->s[i].ph = P_QUIT;
        }
    }
    for (int t = 1; t < g.threads; t++)
        pthread_create(&g.w[t].tid, NULL, worker_main, &g.w[t]);
    worker_main(&g.w[0]);
    for (int t = 1; t < g.threads; t++)
        pthread_join(g.w[t].tid, NULL);
    uint64_t end = now_ns();

    struct worker sum = { 0 };
    for (int t = 0; t < g.threads; t++) {
        struct worker *w = &g.w[t];
        sum.accepted += w->accepted;
        sum.tempfail += w->tempfail;
        sum.permfail += w->permfail;
        sum.errors += w->errors;
        sum.conns += w->conns;
        sum.bytes += w->bytes;
        sum.idle_up += w->idle_up;
        sum.idle_lost += w->idle_lost;
        if (w->lat_max > sum.lat_max)
            sum.lat_max = w->lat_max;
        if (w->last_reply_ns > sum.last_reply_ns)
            sum.last_reply_ns = w->last_reply_ns;
        for (int i = 0; i < BL_HBUCKETS; i++)
            sum.hist[i] += w->hist[i];
    }
    bool timed_out = end >= g.deadline_ns && !stop_flag;
    if (g.idle) {
        printf("idle_established=%" PRIu64 " idle_lost=%" PRIu64 " errors=%" PRIu64 "\n",
               sum.idle_up, sum.idle_lost, sum.errors);
        return 0;
    }
    uint64_t stop_at = sum.last_reply_ns ? sum.last_reply_ns : end;
    double el = (double)(stop_at - g.start_ns) / 1e9;
    uint64_t nlat = 0, p50 = 0, p99 = 0;
    for (int i = 0; i < BL_HBUCKETS; i++)
        nlat += sum.hist[i];
    uint64_t acc = 0;
    bool got50 = false, got99 = false;
    for (int i = 0; i < BL_HBUCKETS && nlat; i++) {
        acc += sum.hist[i];
        if (!got50 && acc * 100 >= nlat * 50)
            p50 = hist_value(i), got50 = true;
        if (!got99 && acc * 100 >= nlat * 99)
            p99 = hist_value(i), got99 = true;
    }
    uint64_t sent = sum.accepted + sum.tempfail + sum.permfail;
    printf("sent=%" PRIu64 " accepted=%" PRIu64 " tempfail=%" PRIu64 " permfail=%" PRIu64
           " errors=%" PRIu64 " conns=%" PRIu64 " elapsed_s=%.3f msgs_per_s=%.1f"
           " mb_per_s=%.2f p50_us=%" PRIu64 " p99_us=%" PRIu64 " max_us=%" PRIu64
           " timed_out=%d\n",
           sent, sum.accepted, sum.tempfail, sum.permfail, sum.errors, sum.conns, el,
           el > 0 ? (double)sum.accepted / el : 0.0,
           el > 0 ? (double)sum.bytes / el / 1e6 : 0.0, p50, p99, sum.lat_max, timed_out);
    return timed_out ? 2 : 0;
}
