/*
 * qstream.c - "queue-stream" on the control socket: `mtactl queue` while
 * mtad runs gets its listing from the workers.
 *
 * PURPOSE   For each worker of the current generation, a socketpair: one
 *           end goes to the worker over its channel (CHAN_QSTREAM with the
 *           descriptor, common/chan.h), the other to mtactl with the reply
 *           ("ok\nqstream N\n" and N descriptors).  The workers write their
 *           listing records (spool.h) straight to mtactl: the master checks
 *           who asks (control.c, as for every request) and relays no byte,
 *           so a compromised worker can neither wedge nor flood it; mtactl
 *           bounds and escapes what it reads.
 * CONTRACT  Answered only when every shard has exactly one running, ready
 *           worker of the current generation and no reload, drain or
 *           stop is under way (an old generation may still deliver the
 *           same shards); otherwise "error: ..." and mtactl reads the
 *           files instead.
 * FAILURE   Any failed socketpair or send: every descriptor made is
 *           closed and the client gets "error: ...".
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "common/util.h"
#include "config/config.h"
#include "master/master_int.h"

/* qstream_workers - the slot of each shard, or -1 with why set. */
static int
qstream_workers(struct master *m, struct slot **by_shard, unsigned nshards,
    const char **why)
{
    size_t i;

    memset(by_shard, 0, nshards * sizeof(*by_shard));
    if (m->stopping || m->next != NULL) {
        *why = "mtad is stopping or reloading";
        return -1;
    }
    for (i = 0; i < MASTER_MAX_SLOTS; i++) {
        struct slot *s = &m->slots[i];

        if (s->role != ROLE_WORKER || s->state == SLOT_FREE ||
            s->state == SLOT_BACKOFF)
            continue;
        if (s->generation != m->cur->id) {
            *why = "an older generation is still delivering";
            return -1;
        }
        if (s->state != SLOT_RUNNING || !s->ready || s->chan < 0 ||
            s->shard >= nshards || by_shard[s->shard] != NULL) {
            *why = "a worker is starting or stopping";
            return -1;
        }
        by_shard[s->shard] = s;
    }
    for (i = 0; i < nshards; i++)
        if (by_shard[i] == NULL) {
            *why = "a worker is starting or stopping";
            return -1;
        }
    return 0;
}


/* qstream_send - text and the descriptors fds[0..n) in one message, to
 * mtactl (the control socket, not a channel). */
static int
qstream_send(int fd, const char *text, const int *fds, unsigned n)
{
    union {
        struct cmsghdr h;
        char           b[CMSG_SPACE(sizeof(int) * MASTER_MAX_SLOTS)];
    }               cm;
    struct iovec    iov = { (void *)(uintptr_t)text, strlen(text) };
    struct msghdr   mh;
    struct cmsghdr *c;

    memset(&mh, 0, sizeof(mh));
    memset(&cm, 0, sizeof(cm));
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = cm.b;
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * n);
    c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * n);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
    return sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) ==
        (ssize_t)iov.iov_len ? 0 : -1;
}


void
master_qstream(struct master *m, int cfd)
{
    struct slot *by_shard[MASTER_MAX_SLOTS];
    int          mine[MASTER_MAX_SLOTS];
    unsigned     nshards = (unsigned)m->cur->cfg->workers, i, made = 0;
    const char  *why = NULL;
    char         text[128];
    struct timeval tv = { 2, 0 };
    int          sv[2];

    if (nshards == 0 || nshards > MASTER_MAX_SLOTS)
        why = "no workers";
    else
        (void)qstream_workers(m, by_shard, nshards, &why);
    for (i = 0; why == NULL && i < nshards; i++) {
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
            why = strerror(errno);
            break;
        }
        if (chan_send(by_shard[i]->chan, CHAN_QSTREAM, NULL, 0, sv[1]) < 0) {
            why = "a worker's channel is full";
            close(sv[0]);
            close(sv[1]);
            break;
        }
        close(sv[1]);                   /* the worker has its copy */
        mine[made++] = sv[0];
    }
    /* a bounded blocking write, as for every reply (control.c) */
    (void)fcntl(cfd, F_SETFL, fcntl(cfd, F_GETFL) & ~O_NONBLOCK);
    (void)setsockopt(cfd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (why == NULL) {
        snprintf(text, sizeof(text), "ok\nqstream %u\n", made);
        if (qstream_send(cfd, text, mine, made) < 0)
            why = "cannot pass the streams";
    }
    if (why != NULL) {
        snprintf(text, sizeof(text), "error: queue-stream: %s\n", why);
        (void)util_write_all(cfd, text, strlen(text));
    }
    for (i = 0; i < made; i++)
        close(mine[i]);
    close(cfd);
}
