/*
 * logd.c - the log process: gathers the records every process sends on the
 * log socketpair and writes them in batches.
 *
 * PURPOSE   Receive datagrams (one record each) straight into one 256 KiB
 *           buffer and write it with one write() when 64 KiB are gathered,
 *           when log.flush_interval has passed since the oldest unwritten
 *           record, and at the end.  A worker never waits for the disk.
 * CONTRACT  The master keeps the receiving end and the log file open, so a
 *           restarted log process continues with both.  Channel commands
 *           from the master (common/chan.h): CHAN_LOG_REOPEN carrying a
 *           new file fd (the master, still root, opened it),
 *           CHAN_LOG_INTERVAL (a new flush interval), CHAN_STOP (drain,
 *           write, exit 0), CHAN_PING.  After a "reopen" the master sends an empty record,
 *           the mark: the records before it go to the old file, those
 *           after it to the new one (the channel is read when the mark
 *           comes, not on every wakeup; an empty record from anyone else
 *           only costs that read).  EOF on the channel or SIGTERM (the
 *           master died) ends it the same way; SIGINT (a Ctrl-C to the
 *           process group) is ignored: the master stops it last.
 * SENDERS   The workers send on one socketpair, the master (and what it
 *           forks without dropping root) on one of its own, so a worker
 *           that fills its queue does not make the master's records
 *           drop; both are read alike.
 *           The receiving ends have SO_PASSCRED: every datagram comes with
 *           the sender's pid and uid as the kernel saw them (a process
 *           can claim only its own; no system call more for the sender).
 *           The master's records (its pid, given) and root's are written
 *           as they are.  From any other sender a line is written only
 *           when logfmt_worker_line() finds it a record of a worker with
 *           that very pid; the others are dropped, and one warning per
 *           datagram names the pid and uid that sent them.  So a
 *           worker's record shows the kernel's pid, and no worker writes
 *           as the master (its "admin:" audit records included).
 * FAILURE   A failed write drops that batch (and says so on stderr): the
 *           log must not stall the relay.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "common/chan.h"
#include "common/ev.h"
#include "common/util.h"
#include "common/log.h"
#include "common/logfmt.h"
#include "common/safefs.h"
#include "master/master_int.h"

#define LOGD_BUF        (512 * 1024)
#define LOGD_HIGH_WATER (64 * 1024)
#define LOGD_BATCH      16          /* datagrams per recvmmsg() */
/* A datagram: one record (at most LOG_RECORD_MAX) or a worker's batch of
 * whole lines (at most LOG_PACK_MAX), and the newline logd_drain() may
 * add */
#define LOGD_SLOT       ((size_t)LOG_PACK_MAX + 1)
#define LOGD_NOTE_MAX   512         /* a refusal warning (logd_refused) */

struct logd {
    int      recv_fd, own_fd, chan, file_fd, sig_fd;
    uint64_t flush_ms;
    char    *buf;
    size_t   len;
    uint64_t first_ms;              /* arrival of the oldest unwritten record */
    uint64_t write_errors;
    int      stop;                  /* a mark found "stop" or EOF */
    pid_t    master;                /* whose records are not checked */
    int      stop_cmd;              /* CHAN_STOP came */
    struct ev_timer flush;          /* first_ms + flush_ms */
    char     notes[LOGD_BATCH * LOGD_NOTE_MAX]; /* one batch's refusals */
    size_t   notes_len;
};

static void
logd_flush(struct logd *d)
{
    size_t  off = 0;
    ssize_t w;

    while (off < d->len) {
        w = write(d->file_fd, d->buf + off, d->len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            if (d->write_errors++ == 0) {
                char msg[128];
                int  n = snprintf(msg, sizeof(msg), "mtad: logd: write: %s; "
                    "records dropped\n", strerror(errno));

                (void)!write(STDERR_FILENO, msg, (size_t)n);
            }
            break;
        }
        off += (size_t)w;
    }
    d->len = 0;
}

/* logd_sender - the credentials the kernel attached to a datagram (pid
 * 0 when none: then no line passes as a worker's); passed descriptors,
 * which nobody should send here, are closed. */
static struct ucred
logd_sender(struct msghdr *mh)
{
    struct ucred    cr = { 0, (uid_t)-1, (gid_t)-1 };
    struct cmsghdr *c;

    for (c = CMSG_FIRSTHDR(mh); c != NULL; c = CMSG_NXTHDR(mh, c)) {
        if (c->cmsg_level != SOL_SOCKET)
            continue;
        if (c->cmsg_type == SCM_CREDENTIALS &&
            c->cmsg_len == CMSG_LEN(sizeof(cr)))
            memcpy(&cr, CMSG_DATA(c), sizeof(cr));
        else if (c->cmsg_type == SCM_RIGHTS)
            for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                i++) {
                int fd;

                memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                (void)close(fd);
            }
    }
    return cr;
}


/* logd_refused - one warning for the lines of a datagram that were not
 * written (in the format of the first: JSON when it looked like it). */
static void
logd_refused(struct logd *d, const struct ucred *cr, unsigned n, int json)
{
    char   rec[LOG_RECORD_MAX];
    size_t len;

    len = log_render(json ? LOG_FORMAT_JSON : LOG_FORMAT_TEXT, rec, LOGL_WARN,
        "forged", LOG_KVS(LKV_I("sender_pid", cr->pid),
        LKV_I("sender_uid", (long long)cr->uid), LKV_I("records", n)),
        "refused %u log record%s that pid %d (uid %lld) sent as another "
        "process's", n, n == 1 ? "" : "s", (int)cr->pid,
        cr->uid == (uid_t)-1 ? -1LL : (long long)cr->uid);
    if (len > LOGD_NOTE_MAX)
        len = LOGD_NOTE_MAX;        /* cannot be: a short fixed text */
    memcpy(d->notes + d->notes_len, rec, len);
    d->notes_len += len;
}


/* logd_pack - datagram src[0..len) from cr to d->buf + at (at <= src:
 * moved down): whole for the master, else line by line, each line only
 * when it is the sender's own.  Returns the new end. */
static size_t
logd_pack(struct logd *d, const struct ucred *cr, const char *src,
    size_t len, size_t at)
{
    const char *p = src, *end = src + len, *nl;
    unsigned    refused = 0;
    int         json = 0;
    size_t      n;

    /* root (a helper the master forks, when it is root) could write the
     * log file itself: only the workers' datagrams are checked */
    if ((cr->pid == d->master && d->master > 0) || cr->uid == 0) {
        memmove(d->buf + at, src, len);
        at += len;
        if (d->buf[at - 1] != '\n')
            d->buf[at++] = '\n';
        return at;
    }
    while (p < end) {
        nl = memchr(p, '\n', (size_t)(end - p));
        n = (size_t)((nl != NULL ? nl : end) - p);
        if (n > 0 && logfmt_worker_line(p, n, (long)cr->pid)) {
            memmove(d->buf + at, p, n);
            at += n;
            d->buf[at++] = '\n';
        } else if (n > 0 && refused++ == 0) {
            json = p[0] == '{';
        }
        p += n + 1;
    }
    if (refused > 0)
        logd_refused(d, cr, refused, json);
    return at;
}


/* Receive until the socket is empty; flush whenever the buffer is full.
 * One recvmmsg() takes up to LOGD_BATCH records, each straight into the
 * buffer at its own slot, then they are packed together (in place: a
 * record moves down, never over a slot not yet packed):
 * a message relayed logs about five records, and one recv() per record
 * was the largest share of mtad's system calls.  A batch that
 * comes back short means the socket was empty just then: stop without
 * the extra call that would only say EAGAIN; epoll wakes us for more. */
static int logd_command(struct logd *d);

static void
logd_drain(struct logd *d, int fd)
{
    struct mmsghdr msgs[LOGD_BATCH];
    struct iovec   iov[LOGD_BATCH];
    /* room for the credentials only: descriptors do not fit (dropped) */
    char           cbuf[LOGD_BATCH][CMSG_SPACE(sizeof(struct ucred))];
    struct ucred   cr;
    size_t         room, n, i, at;
    int            r;

    for (;;) {
        if (LOGD_BUF - d->len < LOGD_BATCH * LOGD_SLOT)
            logd_flush(d);
        room = (LOGD_BUF - d->len) / LOGD_SLOT;
        n = room < LOGD_BATCH ? room : LOGD_BATCH;
        memset(msgs, 0, sizeof(msgs[0]) * n);
        for (i = 0; i < n; i++) {
            iov[i].iov_base = d->buf + d->len + i * LOGD_SLOT;
            iov[i].iov_len = LOGD_SLOT - 1;
            msgs[i].msg_hdr.msg_iov = &iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
            msgs[i].msg_hdr.msg_control = cbuf[i];
            msgs[i].msg_hdr.msg_controllen = sizeof(cbuf[i]);
        }
        r = recvmmsg(fd, msgs, (unsigned)n,
            MSG_DONTWAIT | MSG_CMSG_CLOEXEC, NULL);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return;                 /* EAGAIN: empty */
        }
        if (r > 0 && d->len == 0)
            d->first_ms = util_now_ms();
        at = d->len;
        d->notes_len = 0;
        for (i = 0; i < (size_t)r; i++) {
            size_t len = msgs[i].msg_len;

            cr = logd_sender(&msgs[i].msg_hdr);
            if (len == 0) {
                /* the mark after a "reopen": what came before goes to
                 * the old file (logd_command flushes it), the rest to
                 * the new; the flush empties the buffer, and the slots
                 * still to pack lie above it */
                d->len = at;
                if (logd_command(d))
                    d->stop = 1;    /* after this batch (logd_recv_io) */
                at = d->len;
                continue;
            }
            /* slot i starts at or after at: its lines move down */
            at = logd_pack(d, &cr, iov[i].iov_base, len, at);
        }
        d->len = at;
        if (d->notes_len > 0) {     /* after the batch: the slots are free */
            if (LOGD_BUF - d->len < d->notes_len)
                logd_flush(d);
            memcpy(d->buf + d->len, d->notes, d->notes_len);
            d->len += d->notes_len;
        }
        if (d->len >= LOGD_HIGH_WATER)
            logd_flush(d);
        if ((size_t)r < n)
            return;                 /* drained */
    }
}

static void __attribute__((noreturn))
logd_exit(struct logd *d)
{
    logd_drain(d, d->own_fd);
    logd_drain(d, d->recv_fd);
    logd_flush(d);
    _exit(0);
}

/* --- the channel from the master (common/chan.h) ---------------------- */

static void
logd_chan_stop(const struct chan_msg *m, void *arg)
{
    struct logd *d = arg;

    (void)m;
    d->stop_cmd = 1;
}


static void
logd_chan_ping(const struct chan_msg *m, void *arg)
{
    struct logd *d = arg;

    (void)m;
    (void)chan_send(d->chan, CHAN_PONG, NULL, 0, -1);  /* the watchdog */
}


static void
logd_chan_interval(const struct chan_msg *m, void *arg)
{
    struct logd *d = arg;

    memcpy(&d->flush_ms, m->data, sizeof(d->flush_ms));  /* after a reload */
}


/* logd_chan_reopen - what is gathered goes to the old file; what still
 * waits in the socket (sent after the command, or about then) to the new
 * one. */
static void
logd_chan_reopen(const struct chan_msg *m, void *arg)
{
    struct logd *d = arg;

    logd_flush(d);
    if (d->file_fd != STDERR_FILENO)
        close(d->file_fd);
    d->file_fd = m->fd;
    d->write_errors = 0;
}


static const struct chan_side logd_chan = {
    CHAN_LOGD,
    {
        [CHAN_STOP] = logd_chan_stop,
        [CHAN_PING] = logd_chan_ping,
        [CHAN_LOG_REOPEN] = logd_chan_reopen,
        [CHAN_LOG_INTERVAL] = logd_chan_interval,
    },
    NULL                            /* from the master: nothing to tell */
};


/* One command from the master.  Returns 1 when logd is to stop (asked to,
 * or the master is gone). */
static int
logd_command(struct logd *d)
{
    char buf[CHAN_MSG_MAX + 1];
    int  rc;

    rc = chan_serve(d->chan, &logd_chan, 1, buf, sizeof(buf), d);
    if (rc == CHAN_EOF || rc == CHAN_ESYS)
        return 1;                   /* the master is gone */
    return d->stop_cmd;
}

/* The channel: a command from the master. */
static void
logd_chan_io(struct ev_loop *loop, int fd, unsigned events, void *arg)
{
    (void)loop; (void)fd; (void)events;
    if (logd_command(arg))
        logd_exit(arg);
}

/* Records, on either socket.  A reopen is put in order by its mark
 * (logd_drain), so the channel is not read here on every wakeup. */
static void
logd_recv_io(struct ev_loop *loop, int fd, unsigned events, void *arg)
{
    struct logd *d = arg;

    (void)loop; (void)events;
    logd_drain(d, fd);
    if (d->stop)
        logd_exit(d);
}

/* SIGTERM: the master died (PDEATHSIG); write what we hold. */
static void
logd_sig_io(struct ev_loop *loop, int fd, unsigned events, void *arg)
{
    (void)loop; (void)fd; (void)events;
    logd_exit(arg);
}

static void
logd_flush_timer(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    (void)loop; (void)t;
    logd_flush(arg);
}

/* Before each sleep: the flush timer runs while records wait, due
 * log.flush_interval after the oldest (an "interval" command moves it). */
static void
logd_before_sleep(struct ev_loop *loop, void *arg)
{
    struct logd *d = arg;
    uint64_t     now, due;

    if (d->len == 0) {
        ev_timer_stop(loop, &d->flush);
        return;
    }
    now = util_now_ms();
    due = d->first_ms + d->flush_ms;
    ev_timer_start(loop, &d->flush, due <= now ? 0 : due - now);
}

void
logd_main(int recv_fd, int own_fd, int chan_fd, int file_fd,
    uint64_t flush_ms, pid_t master)
{
    struct logd     d;
    struct ev_loop *loop;
    sigset_t        set;

    memset(&d, 0, sizeof(d));
    d.recv_fd = recv_fd;
    d.own_fd = own_fd;
    d.chan = chan_fd;
    d.file_fd = file_fd;
    d.flush_ms = flush_ms;
    d.master = master;
    d.buf = xmalloc(LOGD_BUF);
    /* SIGTERM (the master died: PDEATHSIG) means "write what you have". */
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigprocmask(SIG_BLOCK, &set, NULL);
    d.sig_fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    loop = ev_new();
    if (loop == NULL)
        fatal("logd: event loop");  /* fatal: the master restarts us */
    ev_timer_init(&d.flush, logd_flush_timer, &d);
    if (ev_watch(loop, d.chan, EV_READ, logd_chan_io, &d) < 0 ||
        ev_watch(loop, d.recv_fd, EV_READ, logd_recv_io, &d) < 0 ||
        ev_watch(loop, d.own_fd, EV_READ, logd_recv_io, &d) < 0 ||
        (d.sig_fd >= 0 && ev_watch(loop, d.sig_fd, EV_READ, logd_sig_io,
        &d) < 0) || ev_before_sleep(loop, logd_before_sleep, &d) < 0)
        fatal("logd: watch");       /* fatal: the master restarts us */
    (void)ev_run(loop);
    fatal("logd: event loop");      /* fatal: ev_run ends only on error */
}

/* logd_open_file - log.file, opened by the master (root) at start and at
 * every reopen: like server.pid_file, in a directory only root (or we)
 * can change, and never through a link, which would make root create or
 * append to any file a worker named. */
int
logd_open_file(const char *path, char *err, size_t errsz)
{
    char        what[512];
    const char *name;
    int         dfd, fd = -1;

    if (strcmp(path, "-") == 0)
        return STDERR_FILENO;
    if ((dfd = safefs_open_parent(path, &name, what, sizeof(what))) >= 0) {
        if (safefs_dir_trusted(dfd, path, what, sizeof(what)) == 0)
            fd = safefs_open_file(dfd, name, O_WRONLY | O_APPEND | O_CREAT,
                0640, path, what, sizeof(what));
        close(dfd);
    }
    if (fd < 0) {
        snprintf(err, errsz, "log.file: %s", what);
        return -1;
    }
    return fd;
}
