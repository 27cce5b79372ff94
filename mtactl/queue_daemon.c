/*
 * queue_daemon.c - `mtactl queue` while mtad runs: the listing comes from
 * the workers' in-memory index (delivery/qindex.c) instead of a million
 * files.
 *
 * PURPOSE   Ask the master for "queue-stream": it answers with one socket
 *           per worker (SCM_RIGHTS), on which that worker writes the
 *           listing records of its messages (spool.h), sorted by id, then
 *           an empty record.  The streams are merged by id, so the order
 *           is the file reader's (by id, that is by arrival), and each
 *           record is decoded into a struct spool_env and given to the
 *           same filter and printing code as a message read from its file.
 * CONTRACT  The workers are less trusted than mtactl (root may run it):
 *           a record is at most QUEUE_REC_MAX bytes and is decoded by
 *           spool_wire_decode() (every length checked); ids must grow
 *           within a stream; text reaches the terminal only through the
 *           escaping printers of queue_format.c; a stream silent for
 *           QUEUE_STREAM_IDLE_MS is given up.
 * FAILURE   queue_scan_daemon(): 1 when mtad cannot answer (not running,
 *           a reload or restart under way, or a worker's stream ended
 *           before any record was taken: it was killed just before):
 *           nothing was printed, the caller reads the files; -1 when a
 *           stream failed after records were taken (said why: a worker
 *           restarted, a bad record); 0 done.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "common/util.h"
#include "config/config.h"
#include "spool/spool.h"
#include "mtactl/mtactl.h"
#include "mtactl/queue_int.h"

#define QUEUE_REC_MAX        (64u << 20)   /* one record, bytes */
#define QUEUE_STREAM_IDLE_MS 30000
#define QUEUE_STREAMS_MAX    128           /* STATUS_MAX_WORKERS */
#define QUEUE_READ_CHUNK     (1u << 20)

struct qd_stream {
    int      fd;
    char    *buf;
    size_t   off, len, cap;
    int      ended;                 /* the empty record came */
    size_t   rec;                   /* current record's length, 0 none */
    char     last[SPOOL_ID_LEN];    /* previous id */
    int      any;
    int      err;                   /* errno of a failed read, 0: EOF */
};

/* qd_ask - connect, send "queue-stream", take the reply and the fds.
 * The number of streams, or -1 (mtad cannot answer). */
static int
qd_ask(const char *path, int *fds)
{
    struct sockaddr_un sun;
    union {
        struct cmsghdr h;
        char           b[CMSG_SPACE(sizeof(int) * QUEUE_STREAMS_MAX)];
    }                  cm;
    char               text[256];
    size_t             tlen = 0;
    int                fd, nfd = 0, want = -1;
    struct pollfd      pf;

    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof(sun.sun_path) ||
        (fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
        return -1;
    memcpy(sun.sun_path, path, strlen(path));
    if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0 ||
        util_write_all(fd, "queue-stream\n", 13) < 0) {
        close(fd);
        return -1;
    }
    pf.fd = fd;
    pf.events = POLLIN;
    for (;;) {
        struct iovec    iov = { text + tlen, sizeof(text) - 1 - tlen };
        struct msghdr   mh;
        struct cmsghdr *c;
        ssize_t         n;

        if (iov.iov_len == 0 || poll(&pf, 1, QUEUE_KICK_MS) != 1)
            goto fail;
        memset(&mh, 0, sizeof(mh));
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        mh.msg_control = cm.b;
        mh.msg_controllen = sizeof(cm.b);
        n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            goto fail;
        for (c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c)) {
            size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);

            if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                continue;
            for (size_t j = 0; j < k; j++) {
                int one;

                memcpy(&one, CMSG_DATA(c) + j * sizeof(int), sizeof(int));
                if (nfd < QUEUE_STREAMS_MAX)
                    fds[nfd++] = one;
                else
                    close(one);
            }
        }
        if (mh.msg_flags & MSG_CTRUNC)
            goto fail;
        if (n == 0)
            break;
        tlen += (size_t)n;
    }
    text[tlen] = '\0';
    if (sscanf(text, "ok\nqstream %d\n", &want) != 1 || want != nfd ||
        want < 1)
        goto fail;
    close(fd);
    return nfd;
fail:
    while (nfd > 0)
        close(fds[--nfd]);
    close(fd);
    return -1;
}


static uint32_t
qd_u32(const char *p)
{
    const unsigned char *u = (const unsigned char *)p;

    return (uint32_t)u[0] | (uint32_t)u[1] << 8 | (uint32_t)u[2] << 16 |
        (uint32_t)u[3] << 24;
}


/* qd_fill - make s's next record whole in its buffer (s->rec set) or see
 * its end.  0, -1 (said why), or -2 when the stream ended without its
 * end record (s->err; the caller says why, or reads the files). */
static int
qd_fill(struct qd_stream *s)
{
    for (;;) {
        size_t have = s->len - s->off, need;
        ssize_t n;
        struct pollfd pf = { .fd = s->fd, .events = POLLIN };

        if (have >= 4) {
            uint32_t l = qd_u32(s->buf + s->off);

            if (l == 0) {
                s->ended = 1;
                return 0;
            }
            if (l > QUEUE_REC_MAX) {
                fprintf(stderr, "mtactl: queue: a worker sent a record of "
                    "%lu bytes; stopped\n", (unsigned long)l);
                return -1;
            }
            if (have >= 4 + (size_t)l) {
                s->rec = l;
                return 0;
            }
            need = 4 + (size_t)l;
        } else {
            need = 4;
        }
        if (s->off + need > s->cap) {
            if (have > 0)
                memmove(s->buf, s->buf + s->off, have);
            s->len = have;
            s->off = 0;
        }
        if (need > s->cap) {
            size_t cap = s->cap ? s->cap : QUEUE_READ_CHUNK;

            while (cap < need)
                cap *= 2;
            s->buf = xrealloc(s->buf, cap);
            s->cap = cap;
        }
        n = read(s->fd, s->buf + s->len, s->cap - s->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            if (poll(&pf, 1, QUEUE_STREAM_IDLE_MS) == 0) {
                fprintf(stderr, "mtactl: queue: a worker sent nothing for "
                    "%d s; stopped\n", QUEUE_STREAM_IDLE_MS / 1000);
                return -1;
            }
            continue;
        }
        if (n <= 0) {
            s->err = n < 0 ? errno : 0;
            return -2;
        }
        s->len += (size_t)n;
    }
}


int
queue_scan_daemon(const struct config *cfg, const struct queue_filter *f,
    void (*fn)(const struct queue_item *it, void *arg), void *arg)
{
    struct qd_stream   s[QUEUE_STREAMS_MAX];
    int                fds[QUEUE_STREAMS_MAX];
    struct spool_rcpt *rcpts = NULL;
    size_t             caprcpt = 0;
    uint64_t           now = util_wall_ms();
    int                n, i, rc = 0, taken = 0;

    if ((n = qd_ask(cfg->control_socket, fds)) < 0)
        return 1;
    memset(s, 0, sizeof(s));
    for (i = 0; i < n; i++) {
        s[i].fd = fds[i];
        /* non-blocking reads: poll() bounds each wait */
        (void)fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
    }
    for (;;) {
        struct spool_env  env;
        struct queue_item it;
        unsigned          state;
        int               best = -1;
        const char       *rec;

        for (i = 0; i < n; i++) {
            if (!s[i].ended && s[i].rec == 0 && (rc = qd_fill(&s[i])) < 0) {
                if (rc == -2 && !taken) {
                    rc = 1;             /* nothing printed: the files */
                    goto done;
                }
                if (rc == -2)
                    fprintf(stderr, "mtactl: queue: a worker's listing "
                        "ended early (%s); run again\n", s[i].err ?
                        strerror(s[i].err) : "it exited or restarted");
                rc = -1;
                goto done;
            }
            if (s[i].ended)
                continue;
            if (best < 0 || memcmp(s[i].buf + s[i].off + 4,
                s[best].buf + s[best].off + 4, SPOOL_ID_LEN) < 0)
                best = i;
        }
        if (best < 0)
            break;
        rec = s[best].buf + s[best].off + 4;
        if (spool_wire_decode(rec, s[best].rec, &env, &state, &rcpts,
            &caprcpt) != SPOOL_OK || (s[best].any &&
            memcmp(rec, s[best].last, SPOOL_ID_LEN) <= 0)) {
            fprintf(stderr, "mtactl: queue: a worker sent a malformed "
                "record; stopped\n");
            rc = -1;
            goto done;
        }
        memcpy(s[best].last, rec, SPOOL_ID_LEN);
        s[best].any = 1;
        taken = 1;
        it.env = &env;
        it.state = (enum queue_state)state;
        if (queue_match(&it, f, now))
            fn(&it, arg);
        s[best].off += 4 + s[best].rec;
        s[best].rec = 0;
    }
done:
    for (i = 0; i < n; i++) {
        close(s[i].fd);
        free(s[i].buf);
    }
    free(rcpts);
    return rc;
}
