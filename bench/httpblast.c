/*
 * httpblast.c - benchmark HTTP load generator for the API's injection.
 *
 * PURPOSE   The near end of bench/inject.py: N concurrent clients POST M
 *           messages in total to one HTTP/1.1 server (mtad's API,
 *           POST /v1/messages), K requests per connection (keep-alive),
 *           and report what was accepted (201), how fast, and the latency
 *           from the request sent to the whole response read.  The
 *           request is built once: a JSON body {"from", "to", "message"}
 *           whose "message" is SIZE bytes of RFC 5322 text made as
 *           smtpblast makes its messages (headers, then 76-character
 *           lines), so that both tools offer the relay the same mail.
 *           One epoll loop, non-blocking sockets; no pipelining (a client
 *           waits for each answer, as an application's HTTP client does).
 * CONTRACT  httpblast -s ADDR:PORT [-c CLIENTS] [-m MESSAGES] [-k PER_CONN]
 *                     [-z SIZE] [-r RCPTS] [-t TOKEN] [-p PATH] [-T SECS]
 *           -k 0 (the default): every client keeps its connection for all
 *           its requests; -k 1: a new connection per request.  -t: sent as
 *           "Authorization: Bearer TOKEN".  Prints one "key=value ..." line
 *           on stdout at the end, the keys of smtpblast's: sent accepted
 *           tempfail (4xx, 503, 429) permfail (other non-201) errors conns
 *           elapsed_s msgs_per_s mb_per_s p50_us p99_us max_us timed_out;
 *           the first non-201 answer's status line and body (escaped, cut)
 *           go to stderr.  Exit 0 when every request was answered (any
 *           status), 2 when the time limit stopped the run, 1 on usage.
 * FAILURE   A connection that breaks (or a server that answers
 *           "Connection: close") is closed and the client reconnects while
 *           requests remain; a request in flight on a broken connection is
 *           counted in errors, not sent again.  More than max(1000, M)
 *           connection errors stop the run.  Every loop is bounded by M and
 *           by the time limit.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HB_INBUF    16384           /* one response head and body at most */
#define HB_HBUCKETS 1344

enum hb_phase { H_CONNECT, H_SEND, H_RECV, H_DONE };

struct hb_cli {
    int           fd;
    enum hb_phase ph;
    size_t        off;              /* bytes of the request sent */
    size_t        inlen;
    uint64_t      on_conn;          /* requests on this connection */
    uint64_t      t_sent;
    char          in[HB_INBUF];
};

static struct {
    struct sockaddr_in addr;
    int      clients, rcpts;
    uint64_t messages, per_conn, size;
    const char *token, *path, *server;
    char    *req;                   /* head + body, sent as is */
    size_t   reqlen, bodylen;
    uint64_t claimed, accepted, tempfail, permfail, errors, conns;
    uint64_t deadline_ns, start_ns, last_ns, lat_max;
    uint64_t hist[HB_HBUCKETS];
    bool     told;                  /* the first refusal is on stderr */
    int      ep, live;
} g = { .clients = 1, .rcpts = 1, .messages = 1, .size = 1024,
        .path = "/v1/messages" };

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

/* Log-linear histogram of microseconds, as smtpblast's: exact below 64,
 * then 32 sub-buckets per power of two. */
static int hist_index(uint64_t v)
{
    if (v < 64)
        return (int)v;
    int msb = 63 - __builtin_clzll(v);
    int k = msb - 5;
    int idx = k * 32 + (int)(v >> k);
    return idx < HB_HBUCKETS ? idx : HB_HBUCKETS - 1;
}

static uint64_t hist_value(int idx)
{
    if (idx < 64)
        return (uint64_t)idx;
    int k = idx / 32 - 1;
    uint64_t top = (uint64_t)(idx - k * 32);
    return (top << k) + ((1ull << k) >> 1);
}

static void die(const char *what)
{
    fprintf(stderr, "httpblast: %s\n", what);
    exit(1);
}

/* ---- the request ---- */

struct hb_str {
    char  *p;
    size_t len, cap;
};

static void s_add(struct hb_str *s, const char *p, size_t n)
{
    if (s->len + n + 1 > s->cap) {
        s->cap = (s->len + n + 1) * 2;
        if (!(s->p = realloc(s->p, s->cap)))
            die("out of memory");
    }
    memcpy(s->p + s->len, p, n);
    s->len += n;
    s->p[s->len] = '\0';
}

static void s_str(struct hb_str *s, const char *p)
{
    s_add(s, p, strlen(p));
}

/* The message: smtpblast's build_message(), exactly g.size bytes (at
 * least the headers), CRLF lines, none starting with a dot. */
static struct hb_str build_message(void)
{
    struct hb_str m = { 0 };
    char hdr[512];
    int h = snprintf(hdr, sizeof hdr,
                     "From: <blast@bench.example>\r\nTo: <rcpt0@sink.example>\r\n"
                     "Subject: httpblast benchmark message\r\n"
                     "Message-ID: <blast.%d@bench.example>\r\n\r\n", (int)getpid());
    size_t size = g.size > (uint64_t)h + 2 ? (size_t)g.size : (size_t)h + 2;
    s_add(&m, hdr, (size_t)h);
    while (m.len < size) {
        size_t left = size - m.len, line = left > 78 ? 78 : left;
        char buf[80];
        if (left - line < 3 && left > 78)
            line = left - 3;         /* keep room for a last short line */
        for (size_t i = 0; i + 2 < line; i++)
            buf[i] = (char)('a' + (m.len + i) % 26);
        if (line >= 2) {
            buf[line - 2] = '\r';
            buf[line - 1] = '\n';
        } else {
            buf[0] = 'x';
        }
        s_add(&m, buf, line);
    }
    m.p[size - 2] = '\r';            /* it ends in CRLF */
    m.p[size - 1] = '\n';
    return m;
}

/* JSON string of the message: CR and LF escaped, the rest is ASCII. */
static void json_text(struct hb_str *b, const struct hb_str *m)
{
    s_str(b, "\"");
    for (size_t i = 0; i < m->len; i++) {
        if (m->p[i] == '\r')
            s_str(b, "\\r");
        else if (m->p[i] == '\n')
            s_str(b, "\\n");
        else
            s_add(b, &m->p[i], 1);
    }
    s_str(b, "\"");
}

static void build_request(void)
{
    struct hb_str msg = build_message(), body = { 0 }, req = { 0 };
    char line[512];

    s_str(&body, "{\"from\":\"blast@bench.example\",\"to\":[");
    for (int i = 0; i < g.rcpts; i++) {
        snprintf(line, sizeof line, "%s\"rcpt%d@sink.example\"",
                 i ? "," : "", i);
        s_str(&body, line);
    }
    s_str(&body, "],\"message\":");
    json_text(&body, &msg);
    s_str(&body, "}");
    snprintf(line, sizeof line, "POST %s HTTP/1.1\r\nHost: %s\r\n"
             "Content-Type: application/json\r\nContent-Length: %zu\r\n",
             g.path, g.server, body.len);
    s_str(&req, line);
    if (g.token) {
        s_str(&req, "Authorization: Bearer ");
        s_str(&req, g.token);
        s_str(&req, "\r\n");
    }
    if (g.per_conn == 1)
        s_str(&req, "Connection: close\r\n");
    s_str(&req, "\r\n");
    s_add(&req, body.p, body.len);
    g.req = req.p;
    g.reqlen = req.len;
    g.bodylen = body.len;
    free(msg.p);
    free(body.p);
}

/* ---- connections ---- */

static void cli_close(struct hb_cli *c)
{
    if (c->fd >= 0) {
        epoll_ctl(g.ep, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
    }
    c->fd = -1;
    c->inlen = c->off = 0;
    c->on_conn = 0;
}

static void cli_want(struct hb_cli *c, uint32_t events)
{
    struct epoll_event ev = { .events = events, .data.ptr = c };
    epoll_ctl(g.ep, EPOLL_CTL_MOD, c->fd, &ev);
}

static int cli_connect(struct hb_cli *c)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0)
        return -1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&g.addr, sizeof g.addr) < 0 &&
        errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    c->fd = fd;
    c->ph = H_CONNECT;
    struct epoll_event ev = { .events = EPOLLOUT, .data.ptr = c };
    epoll_ctl(g.ep, EPOLL_CTL_ADD, fd, &ev);
    g.conns++;
    return 0;
}

static void cli_finish(struct hb_cli *c)
{
    cli_close(c);
    if (c->ph != H_DONE) {
        c->ph = H_DONE;
        g.live--;
    }
}

/* The next request: claim one, connect if needed, start sending. */
static void cli_next(struct hb_cli *c)
{
    if (stop_flag || g.claimed >= g.messages || now_ns() >= g.deadline_ns ||
        g.errors > (g.messages > 1000 ? g.messages : 1000)) {
        cli_finish(c);
        return;
    }
    g.claimed++;
    c->off = 0;
    c->inlen = 0;
    if (c->fd < 0) {
        if (cli_connect(c) < 0) {
            g.errors++;
            g.claimed--;
            cli_finish(c);
        }
        return;                     /* H_CONNECT: sends when writable */
    }
    c->ph = H_SEND;
    cli_want(c, EPOLLOUT);
}

static void cli_broken(struct hb_cli *c)
{
    g.errors++;
    cli_close(c);
    cli_next(c);
}

static void cli_send(struct hb_cli *c)
{
    if (c->ph == H_CONNECT) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {
            cli_broken(c);
            return;
        }
        c->ph = H_SEND;
    }
    if (c->off == 0)
        c->t_sent = now_ns();
    while (c->off < g.reqlen) {
        ssize_t w = send(c->fd, g.req + c->off, g.reqlen - c->off,
                         MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                return;
            cli_broken(c);
            return;
        }
        c->off += (size_t)w;
    }
    c->ph = H_RECV;
    cli_want(c, EPOLLIN);
}

/* A quoted copy of an answer for stderr: printable ASCII, the rest \xNN. */
static void tell(const char *p, size_t n)
{
    fputs("httpblast: first refusal: ", stderr);
    for (size_t i = 0; i < n && i < 600; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch >= 0x20 && ch < 0x7f)
            fputc(ch, stderr);
        else
            fprintf(stderr, "\\x%02x", ch);
    }
    fputc('\n', stderr);
}

/* A whole response in c->in?  Returns its length (0: not yet, -1: bad),
 * with its status and whether the server closes after it. */
static ssize_t parse_response(struct hb_cli *c, int *status, bool *closes)
{
    char *end = memmem(c->in, c->inlen, "\r\n\r\n", 4);
    if (!end)
        return c->inlen >= HB_INBUF ? -1 : 0;
    size_t head = (size_t)(end - c->in) + 4, clen = 0;
    if (c->inlen < 12 || memcmp(c->in, "HTTP/1.", 7) != 0)
        return -1;
    *status = atoi(c->in + 9);
    *closes = memcmp(c->in, "HTTP/1.0", 8) == 0;
    for (char *p = memchr(c->in, '\n', head); p && p < end;
         p = memchr(p + 1, '\n', head - (size_t)(p + 1 - c->in))) {
        if (strncasecmp(p + 1, "Content-Length:", 15) == 0)
            clen = strtoull(p + 16, NULL, 10);
        else if (strncasecmp(p + 1, "Connection:", 11) == 0) {
            const char *v = p + 12;
            while (*v == ' ')
                v++;
            *closes = strncasecmp(v, "close", 5) == 0;
        }
    }
    if (head + clen > HB_INBUF)
        return -1;
    return c->inlen >= head + clen ? (ssize_t)(head + clen) : 0;
}

static void cli_recv(struct hb_cli *c)
{
    ssize_t r = recv(c->fd, c->in + c->inlen, HB_INBUF - c->inlen, 0);
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (r <= 0) {
        cli_broken(c);
        return;
    }
    c->inlen += (size_t)r;
    int status = 0;
    bool closes = false;
    ssize_t n = parse_response(c, &status, &closes);
    if (n == 0)
        return;
    if (n < 0) {
        if (!g.told)
            tell(c->in, c->inlen);
        g.told = true;
        cli_broken(c);
        return;
    }
    uint64_t t = now_ns(), us = (t - c->t_sent) / 1000;
    g.hist[hist_index(us)]++;
    if (us > g.lat_max)
        g.lat_max = us;
    g.last_ns = t;
    if (status == 201) {
        g.accepted++;
    } else {
        if (status == 429 || status == 503)
            g.tempfail++;
        else
            g.permfail++;
        if (!g.told)
            tell(c->in, (size_t)n);
        g.told = true;
    }
    c->on_conn++;
    if (closes || (g.per_conn && c->on_conn >= g.per_conn))
        cli_close(c);
    cli_next(c);
}

static void run(struct hb_cli *cl)
{
    struct epoll_event evs[64];
    for (int i = 0; i < g.clients; i++) {
        cl[i].fd = -1;
        cl[i].ph = H_SEND;
        g.live++;
        cli_next(&cl[i]);
    }
    while (g.live > 0 && !stop_flag) {
        uint64_t now = now_ns();
        if (now >= g.deadline_ns)
            break;
        int ms = (int)((g.deadline_ns - now) / 1000000) + 1;
        int n = epoll_wait(g.ep, evs, 64, ms > 100 ? 100 : ms);
        for (int i = 0; i < n; i++) {
            struct hb_cli *c = evs[i].data.ptr;
            if (c->fd < 0)
                continue;
            if (c->ph == H_RECV)
                cli_recv(c);
            else
                cli_send(c);
        }
    }
}

static void usage(void)
{
    fprintf(stderr,
            "usage: httpblast -s ADDR:PORT [-c CLIENTS] [-m MESSAGES]\n"
            "                 [-k PER_CONN(0=all)] [-z SIZE] [-r RCPTS]\n"
            "                 [-t TOKEN] [-p PATH] [-T SECS]\n");
    exit(1);
}

static void report(void)
{
    uint64_t end = now_ns(), nlat = 0, acc = 0, p50 = 0, p99 = 0;
    bool timed_out = end >= g.deadline_ns && !stop_flag;
    bool got50 = false, got99 = false;
    for (int i = 0; i < HB_HBUCKETS; i++)
        nlat += g.hist[i];
    for (int i = 0; i < HB_HBUCKETS && nlat; i++) {
        acc += g.hist[i];
        if (!got50 && acc * 100 >= nlat * 50)
            p50 = hist_value(i), got50 = true;
        if (!got99 && acc * 100 >= nlat * 99)
            p99 = hist_value(i), got99 = true;
    }
    double el = (double)((g.last_ns ? g.last_ns : end) - g.start_ns) / 1e9;
    printf("sent=%" PRIu64 " accepted=%" PRIu64 " tempfail=%" PRIu64
           " permfail=%" PRIu64 " errors=%" PRIu64 " conns=%" PRIu64
           " elapsed_s=%.3f msgs_per_s=%.1f mb_per_s=%.2f p50_us=%" PRIu64
           " p99_us=%" PRIu64 " max_us=%" PRIu64 " timed_out=%d\n",
           g.accepted + g.tempfail + g.permfail, g.accepted, g.tempfail,
           g.permfail, g.errors, g.conns, el,
           el > 0 ? (double)g.accepted / el : 0.0,
           el > 0 ? (double)(g.accepted * g.bodylen) / el / 1e6 : 0.0,
           p50, p99, g.lat_max, timed_out);
    exit(timed_out ? 2 : 0);
}

int main(int argc, char **argv)
{
    double limit_s = 60;
    int opt;
    while ((opt = getopt(argc, argv, "s:c:m:k:z:r:t:p:T:")) != -1) {
        switch (opt) {
        case 's': g.server = optarg; break;
        case 'c': g.clients = atoi(optarg); break;
        case 'm': g.messages = strtoull(optarg, NULL, 10); break;
        case 'k': g.per_conn = strtoull(optarg, NULL, 10); break;
        case 'z': g.size = strtoull(optarg, NULL, 10); break;
        case 'r': g.rcpts = atoi(optarg); break;
        case 't': g.token = optarg; break;
        case 'p': g.path = optarg; break;
        case 'T': limit_s = atof(optarg); break;
        default: usage();
        }
    }
    if (!g.server || g.clients < 1 || g.clients > 10000 || g.rcpts < 1 ||
        g.rcpts > 100 || limit_s <= 0 || g.size > (64u << 20) ||
        strlen(g.server) > 200 || strlen(g.path) > 200 ||
        strpbrk(g.path, "\r\n ") || (g.token && strpbrk(g.token, "\r\n")))
        usage();
    char host[256];
    snprintf(host, sizeof host, "%s", g.server);
    char *colon = strrchr(host, ':');
    if (!colon)
        usage();
    *colon = '\0';
    g.addr.sin_family = AF_INET;
    g.addr.sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, host, &g.addr.sin_addr) != 1)
        usage();
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 &&
        rl.rlim_cur < (rlim_t)g.clients + 64) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    build_request();
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = { .sa_handler = on_signal };
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    struct hb_cli *cl = calloc((size_t)g.clients, sizeof *cl);
    if (!cl || (g.ep = epoll_create1(EPOLL_CLOEXEC)) < 0)
        die("out of memory");
    g.start_ns = now_ns();
    g.deadline_ns = g.start_ns + (uint64_t)(limit_s * 1e9);
    run(cl);
    report();
}
