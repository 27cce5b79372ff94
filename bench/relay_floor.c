/*
 * bench/relay_floor.c - the least CPU a spooling relay spends per message.
 *
 * PURPOSE   A floor for the 1 MiB row of `make bench`: whatever
 *           else it does, a relay that commits a message to a tmpfs spool
 *           before it acknowledges it, and then sends it on, has to take
 *           the bytes off a socket, write them into a file, read them back
 *           and hand them to another socket.  This process does only that,
 *           over loopback TCP: a tool thread sends SIZE-byte messages on
 *           SESSIONS connections at once (one thread, non-blocking sockets,
 *           as smtpblast does), the main thread relays them, a sink thread
 *           reads and drops them.  The relay visits the sessions in turn,
 *           one recv of at most 128 KiB each (as an event loop serving them
 *           all does), pwrite()s it into that session's file in DIR, and
 *           once a message is whole, one pread() of it and one send().  No
 *           SMTP, no parsing, no acknowledgement.  Each session's file is
 *           the one its message before used, written over, as mtad's spool
 *           does on tmpfs (spool/spool_pool.c); with "new" each message
 *           gets a new file, unlinked and closed after its send (mtad
 *           before that).  Each thread's CPU is read from its own CPU
 *           clock.
 * CONTRACT  relay_floor [SIZE [N [DIR [reuse|new [SESSIONS]]]]]  (1048576,
 *           1000, /dev/shm, reuse, 1; N is rounded down to a multiple of
 *           SESSIONS, at most 256)  ->  one line on stdout: sessions,
 *           msgs, then milliseconds of CPU per message for the relay (and
 *           its recv, write, pread, send and unlink+close parts), the tool
 *           thread and the sink thread.  Exit 0, or 1 with a message on
 *           stderr.
 * FAILURE   Every call is checked; a short or failed one ends the run
 *           with exit 1.  The loops are bounded by N.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#define PIECE        (128 * 1024)
#define MAX_SESSIONS 256

enum { P_RECV, P_WRITE, P_PREAD, P_SEND, P_UNLINK, P_N };

static size_t             size = 1048576;
static long               per;          /* messages per session */
static int                nsess = 1;
static struct sockaddr_in in_sa;
static double             tool_ms, sink_ms;

/* one inbound session of the relay */
struct sess {
    int    in;                  /* its socket */
    int    fd;                  /* its file, -1 before the first message */
    size_t got;                 /* bytes of the message in the file */
    long   done;                /* messages relayed */
    char   path[4096];
};

static double
cpu_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void
die(const char *what)
{
    fprintf(stderr, "relay_floor: %s: %s\n", what, strerror(errno));
    exit(1);
}

static int
listener(struct sockaddr_in *sa)
{
    socklen_t len = sizeof(*sa);
    int       fd = socket(AF_INET, SOCK_STREAM, 0);

    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)sa, sizeof(*sa)) != 0 ||
        listen(fd, MAX_SESSIONS) != 0 ||
        getsockname(fd, (struct sockaddr *)sa, &len) != 0)
        die("listen");
    return fd;
}

static int
dial(const struct sockaddr_in *sa)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    if (fd < 0 || connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) != 0)
        die("connect");
    return fd;
}

static void
send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

        if (w <= 0)
            die("send");
        p += w;
        n -= (size_t)w;
    }
}

/* tool_send - one non-blocking send of the rest of a session's current
 * message; 1 when the session has sent all its messages. */
static int
tool_send(int fd, const char *msg, size_t *off, long *sent)
{
    ssize_t w = send(fd, msg + *off, size - *off, MSG_NOSIGNAL);

    if (w < 0 && errno == EAGAIN)
        return 0;
    if (w <= 0)
        die("tool send");
    *off += (size_t)w;
    if (*off < size)
        return 0;
    *off = 0;
    return ++*sent == per;
}

/* tool - nsess connections from one thread, each sent per messages as
 * fast as the relay takes them. */
static void *
tool(void *arg)
{
    struct pollfd p[MAX_SESSIONS];
    size_t        off[MAX_SESSIONS] = { 0 };
    long          sent[MAX_SESSIONS] = { 0 };
    char         *msg = malloc(size);
    double        t0;
    int           c, left = nsess;

    (void)arg;
    if (msg == NULL)
        die("malloc");
    memset(msg, 'x', size);
    for (c = 0; c < nsess; c++) {
        p[c].fd = dial(&in_sa);
        p[c].events = POLLOUT;
        if (fcntl(p[c].fd, F_SETFL, O_NONBLOCK) != 0)
            die("fcntl");
    }
    t0 = cpu_ms();
    while (left > 0) {
        if (poll(p, (nfds_t)nsess, -1) < 0)
            die("poll");
        for (c = 0; c < nsess; c++) {
            if ((p[c].revents & POLLOUT) && p[c].events != 0 &&
                tool_send(p[c].fd, msg, &off[c], &sent[c])) {
                p[c].events = 0;        /* done: poll ignores it */
                left--;
            }
        }
    }
    tool_ms = cpu_ms() - t0;
    for (c = 0; c < nsess; c++)
        close(p[c].fd);
    free(msg);
    return NULL;
}

static void *
sink(void *arg)
{
    int     fd = *(int *)arg;
    char   *buf = malloc(PIECE);
    double  t0 = cpu_ms();
    ssize_t r;

    if (buf == NULL)
        die("malloc");
    while ((r = recv(fd, buf, PIECE, 0)) > 0)
        ;
    if (r < 0)
        die("sink recv");
    sink_ms = cpu_ms() - t0;
    free(buf);
    return NULL;
}

/* relay_piece - one recv from session s into its file; 1 when its
 * message is whole. */
static int
relay_piece(struct sess *s, char *piece, double *part)
{
    size_t  want = size - s->got < PIECE ? size - s->got : PIECE;
    double  t = cpu_ms(), w;
    ssize_t r;

    if (s->fd < 0 && (s->fd = open(s->path, O_RDWR | O_CREAT | O_EXCL |
        O_CLOEXEC, 0600)) < 0)
        die(s->path);
    if ((r = recv(s->in, piece, want, 0)) <= 0)
        die("relay recv");
    w = cpu_ms();
    part[P_RECV] += w - t;
    if (pwrite(s->fd, piece, (size_t)r, (off_t)s->got) != r)
        die("write");
    part[P_WRITE] += cpu_ms() - w;
    s->got += (size_t)r;
    return s->got == size;
}

/* relay_out - session s's whole message: read back, send on, and the
 * file kept for its next message or (new) removed. */
static void
relay_out(struct sess *s, char *whole, int out, int reuse, double *part)
{
    double t = cpu_ms();

    if (pread(s->fd, whole, size, 0) != (ssize_t)size)
        die("pread");
    part[P_PREAD] += cpu_ms() - t;
    t = cpu_ms();
    send_all(out, whole, size);
    part[P_SEND] += cpu_ms() - t;
    s->got = 0;
    s->done++;
    if (reuse && s->done < per)
        return;                         /* the same size: nothing to cut */
    t = cpu_ms();
    if (unlink(s->path) != 0 || close(s->fd) != 0)
        die("unlink");
    s->fd = -1;
    part[P_UNLINK] += cpu_ms() - t;
}

int
main(int argc, char **argv)
{
    static struct sess  ss[MAX_SESSIONS];
    struct sockaddr_in  out_sa;
    pthread_t           tt, st;
    const char         *dir = argc > 3 ? argv[3] : "/dev/shm";
    char               *piece, *whole;
    double              part[P_N] = { 0 }, t0, t;
    long                nmsg = 1000, total;
    int                 lin, lout, out, sfd, reuse, c, left;

    if (argc > 1)
        size = strtoul(argv[1], NULL, 10);
    if (argc > 2)
        nmsg = strtol(argv[2], NULL, 10);
    reuse = argc <= 4 || strcmp(argv[4], "new") != 0;
    if (argc > 5)
        nsess = atoi(argv[5]);
    if (size == 0 || nsess < 1 || nsess > MAX_SESSIONS || nmsg < nsess ||
        (argc > 4 && reuse && strcmp(argv[4], "reuse") != 0))
        return fprintf(stderr, "usage: relay_floor [SIZE [N [DIR "
            "[reuse|new [SESSIONS]]]]]\n"), 1;
    per = nmsg / nsess;
    total = per * nsess;
    piece = malloc(PIECE);
    whole = malloc(size);
    if (piece == NULL || whole == NULL)
        die("malloc");
    memset(whole, 0, size);             /* faulted in before the clock */
    lin = listener(&in_sa);
    lout = listener(&out_sa);
    out = dial(&out_sa);
    if ((sfd = accept(lout, NULL, NULL)) < 0)
        die("accept");
    pthread_create(&st, NULL, sink, &sfd);
    pthread_create(&tt, NULL, tool, NULL);
    for (c = 0; c < nsess; c++) {
        if ((ss[c].in = accept(lin, NULL, NULL)) < 0)
            die("accept");
        ss[c].fd = -1;
        snprintf(ss[c].path, sizeof(ss[c].path), "%s/relay_floor.%d.%d",
            dir, (int)getpid(), c);
    }
    t0 = cpu_ms();
    for (left = nsess; left > 0; ) {
        for (c = 0; c < nsess; c++) {
            if (ss[c].done == per || !relay_piece(&ss[c], piece, part))
                continue;
            relay_out(&ss[c], whole, out, reuse, part);
            left -= ss[c].done == per;
        }
    }
    t = cpu_ms() - t0;
    shutdown(out, SHUT_WR);
    pthread_join(tt, NULL);
    pthread_join(st, NULL);
    printf("sessions=%d msgs=%ld size=%zu relay_cpu_ms=%.3f (recv %.3f "
        "write %.3f pread %.3f send %.3f unlink+close %.3f) "
        "tool_cpu_ms=%.3f sink_cpu_ms=%.3f\n", nsess, total, size,
        t / total, part[P_RECV] / total, part[P_WRITE] / total,
        part[P_PREAD] / total, part[P_SEND] / total, part[P_UNLINK] / total,
        tool_ms / total, sink_ms / total);
    return 0;
}
