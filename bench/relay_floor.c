/*
 * bench/relay_floor.c - the least CPU a spooling relay spends per message.
 *
 * PURPOSE   A floor for the 1 MiB row of `make bench` (issue 16): whatever
 *           else it does, a relay that commits a message to a tmpfs spool
 *           before it acknowledges it, and then sends it on, has to take
 *           the bytes off a socket, write them into a file, read them back
 *           and hand them to another socket.  This process does only that,
 *           over loopback TCP: a tool thread sends SIZE-byte messages, the
 *           main thread relays each (recv in 128 KiB pieces, pwrite() each
 *           into a file in DIR, one pread() of the whole file, send()), a
 *           sink thread reads and drops them.  No SMTP, no parsing, no
 *           acknowledgement.  The file is the one the message before
 *           used, written over, as mtad's spool does on tmpfs
 *           (spool/spool_pool.c); with "new" each message gets a new file,
 *           unlinked and closed after its send (mtad before that).  Each
 *           thread's CPU is read from its own CPU clock.
 * CONTRACT  relay_floor [SIZE [N [DIR [reuse|new]]]]  (1048576, 1000,
 *           /dev/shm, reuse)  ->  one line on stdout: msgs, then
 *           milliseconds of CPU per message for the relay (and its recv,
 *           write, pread, send and unlink+close parts), the tool thread
 *           and the sink thread.  Exit 0, or 1 with a message on stderr.
 * FAILURE   Every call is checked; a short or failed one ends the run
 *           with exit 1.  The loop is bounded by N.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#define PIECE (128 * 1024)

static size_t size = 1048576;
static long   nmsg = 1000;
static double tool_ms, sink_ms;

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
        listen(fd, 4) != 0 ||
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

static void *
tool(void *arg)
{
    int   fd = dial(arg);
    char *msg = malloc(size);
    double t0;
    long  i;

    if (msg == NULL)
        die("malloc");
    memset(msg, 'x', size);
    t0 = cpu_ms();
    for (i = 0; i < nmsg; i++)
        send_all(fd, msg, size);
    tool_ms = cpu_ms() - t0;
    close(fd);
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

int
main(int argc, char **argv)
{
    struct sockaddr_in in_sa, out_sa;
    pthread_t          tt, st;
    const char        *dir = argc > 3 ? argv[3] : "/dev/shm";
    char               path[4096], *piece, *whole;
    double             part[5] = { 0 }, t, t0;
    int                lin, lout, in, out, sfd, reuse, kept = -1;
    long               i;

    if (argc > 1)
        size = strtoul(argv[1], NULL, 10);
    if (argc > 2)
        nmsg = strtol(argv[2], NULL, 10);
    reuse = argc <= 4 || strcmp(argv[4], "new") != 0;
    if (size == 0 || nmsg <= 0 || (argc > 4 && reuse &&
        strcmp(argv[4], "reuse") != 0))
        return fprintf(stderr, "usage: relay_floor [SIZE [N [DIR "
            "[reuse|new]]]]\n"), 1;
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
    pthread_create(&tt, NULL, tool, &in_sa);
    if ((in = accept(lin, NULL, NULL)) < 0)
        die("accept");
    snprintf(path, sizeof(path), "%s/relay_floor.%d", dir, (int)getpid());
    t0 = cpu_ms();
    for (i = 0; i < nmsg; i++) {
        size_t got = 0;
        int    fd;

        t = cpu_ms();
        if (kept >= 0)
            fd = kept;
        else if ((fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC,
            0600)) < 0)
            die(path);
        while (got < size) {
            size_t  want = size - got < PIECE ? size - got : PIECE;
            ssize_t r = recv(in, piece, want, 0);
            double  w;

            if (r <= 0)
                die("relay recv");
            w = cpu_ms();
            part[0] += w - t;
            if (pwrite(fd, piece, (size_t)r, (off_t)got) != r)
                die("write");
            t = cpu_ms();
            part[1] += t - w;
            got += (size_t)r;
        }
        if (pread(fd, whole, size, 0) != (ssize_t)size)
            die("pread");
        part[2] += cpu_ms() - t;
        t = cpu_ms();
        send_all(out, whole, size);
        part[3] += cpu_ms() - t;
        if (reuse) {
            kept = fd;                  /* the same size: nothing to cut */
            continue;
        }
        t = cpu_ms();
        if (unlink(path) != 0 || close(fd) != 0)
            die("unlink");
        part[4] += cpu_ms() - t;
    }
    if (kept >= 0 && (unlink(path) != 0 || close(kept) != 0))
        die("unlink");
    t = cpu_ms() - t0;
    shutdown(out, SHUT_WR);
    pthread_join(tt, NULL);
    pthread_join(st, NULL);
    printf("msgs=%ld size=%zu relay_cpu_ms=%.3f (recv %.3f write %.3f "
        "pread %.3f send %.3f unlink+close %.3f) tool_cpu_ms=%.3f "
        "sink_cpu_ms=%.3f\n", nmsg, size, t / nmsg, part[0] / nmsg,
        part[1] / nmsg, part[2] / nmsg, part[3] / nmsg, part[4] / nmsg,
        tool_ms / nmsg, sink_ms / nmsg);
    return 0;
}
