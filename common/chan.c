/*
 * chan.c - the typed master<->child channel (see chan.h).
 *
 * PURPOSE   One table says, per command, who may receive it, how long its
 *           payload may be and whether a descriptor travels with it; the
 *           sender and the decoder both check it, so a message the table
 *           forbids is neither sent nor handed to a handler.
 * FAILURE   Never logs (chan.h).
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "common/chan.h"

#define TO(r)   (1u << (r))

static const struct chan_spec {
    const char *name;
    unsigned    to;                 /* mask of receiving roles */
    size_t      min, max;           /* payload bytes */
    int         fd;                 /* a descriptor must travel with it */
} chan_specs[CHAN_NCMD] = {
    [CHAN_STOP]         = { "stop", TO(CHAN_WORKER) | TO(CHAN_LOGD), 0, 0, 0 },
    [CHAN_PING]         = { "ping", TO(CHAN_WORKER) | TO(CHAN_LOGD), 0, 0, 0 },
    [CHAN_PONG]         = { "pong", TO(CHAN_MASTER), 0, 0, 0 },
    [CHAN_READY]        = { "ready", TO(CHAN_MASTER), 0, 0, 0 },
    [CHAN_DRAIN]        = { "drain", TO(CHAN_WORKER), 0, 0, 0 },
    [CHAN_KICK]         = { "kick", TO(CHAN_WORKER), 0, 255, 0 },
    [CHAN_QSTREAM]      = { "qstream", TO(CHAN_WORKER), 0, 0, 1 },
    [CHAN_TLSRPT_ADD]   = { "tlsrpt-add", TO(CHAN_MASTER), 1,
                            CHAN_PAYLOAD_MAX, 0 },
    [CHAN_TLSRPT_SEND]  = { "tlsrpt-send", TO(CHAN_WORKER), 1,
                            CHAN_PAYLOAD_MAX, 0 },
    [CHAN_SANDBOX_TEST] = { "sandbox-test", TO(CHAN_WORKER), 0, 0, 0 },
    [CHAN_LOG_REOPEN]   = { "reopen", TO(CHAN_LOGD), 0, 0, 1 },
    [CHAN_LOG_INTERVAL] = { "interval", TO(CHAN_LOGD), sizeof(uint64_t),
                            sizeof(uint64_t), 0 },
    [CHAN_ROUTES]       = { "routes", TO(CHAN_WORKER), 0, 0, 0 },
    [CHAN_AUTH_CONNECT] = { "auth-connect", TO(CHAN_MASTER), 0, 0, 0 },
    [CHAN_AUTH_SOCKET]  = { "auth-socket", TO(CHAN_WORKER), 0, 0, 1 },
    [CHAN_AUTH_REFUSED] = { "auth-refused", TO(CHAN_WORKER), 0, 255, 0 },
    [CHAN_SHAPE_EVENT]  = { "shape-event", TO(CHAN_WORKER), 5, 1024, 0 },
};


const char *
chan_name(enum chan_cmd cmd)
{
    if ((unsigned)cmd >= CHAN_NCMD || chan_specs[cmd].name == NULL)
        return "?";
    return chan_specs[cmd].name;
}


/* chan_check - whether (cmd, n bytes, a descriptor or not) is a message
 * the table allows for some receiver in mask; NULL, or why not. */
static const char *
chan_check(uint32_t cmd, size_t n, int have_fd, unsigned mask)
{
    const struct chan_spec *sp;

    if (cmd >= CHAN_NCMD || chan_specs[cmd].name == NULL)
        return "unknown message type";
    sp = &chan_specs[cmd];
    if ((sp->to & mask) == 0)
        return "a message this end does not take";
    if (n < sp->min || n > sp->max)
        return "payload length out of range for its type";
    if (sp->fd && !have_fd)
        return "descriptor missing";
    if (!sp->fd && have_fd)
        return "descriptor where none belongs";
    return NULL;
}


int
chan_send(int fd, enum chan_cmd cmd, const void *p, size_t n, int pass_fd)
{
    union {
        struct cmsghdr h;
        char           b[CMSG_SPACE(sizeof(int))];
    }               cm;
    struct chan_hdr h = { (uint32_t)cmd, (uint32_t)n };
    struct iovec    iov[2] = { { &h, sizeof(h) }, { (void *)(uintptr_t)p, n } };
    struct msghdr   mh;
    struct cmsghdr *c;

    if (chan_check((uint32_t)cmd, n, pass_fd >= 0, ~0u) != NULL) {
        errno = EINVAL;
        return -1;
    }
    memset(&mh, 0, sizeof(mh));
    mh.msg_iov = iov;
    mh.msg_iovlen = n > 0 ? 2 : 1;
    if (pass_fd >= 0) {
        memset(&cm, 0, sizeof(cm));
        mh.msg_control = cm.b;
        mh.msg_controllen = sizeof(cm.b);
        c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
    }
    if (sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) !=
        (ssize_t)(sizeof(h) + n))
        return -1;
    return 0;
}


int
chan_decode(const void *pkt, size_t n, int have_fd, enum chan_role me,
    struct chan_msg *out, const char **why)
{
    struct chan_hdr h;

    memset(out, 0, sizeof(*out));
    out->fd = -1;
    if (n < sizeof(h)) {
        *why = "packet shorter than the header";
        return CHAN_EBAD;
    }
    memcpy(&h, pkt, sizeof(h));     /* the buffer need not be aligned */
    if (h.len != n - sizeof(h)) {
        *why = "length field is not the packet's";
        return CHAN_EBAD;
    }
    if ((*why = chan_check(h.type, h.len, have_fd, TO(me))) != NULL)
        return CHAN_EBAD;
    out->cmd = (enum chan_cmd)h.type;
    out->data = (const char *)pkt + sizeof(h);
    out->len = h.len;
    return CHAN_OK;
}


/* chan_recvmsg - one packet and the descriptor it carries (*fd, else -1;
 * more than one, or a truncated control part: all closed, *bad set). */
static ssize_t
chan_recvmsg(int fd, char *buf, size_t cap, int *passed, int *bad)
{
    union {
        struct cmsghdr h;
        char           b[CMSG_SPACE(sizeof(int) * 4)];
    }               cm;
    struct iovec    iov = { buf, cap };
    struct msghdr   mh;
    struct cmsghdr *c;
    ssize_t         n;

    memset(&mh, 0, sizeof(mh));
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = cm.b;
    mh.msg_controllen = sizeof(cm.b);
    *passed = -1;
    *bad = 0;
    do
        n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return n;
    for (c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c)) {
        size_t k, nfd;

        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (k = 0; k < nfd; k++) {
            int one;

            memcpy(&one, CMSG_DATA(c) + k * sizeof(int), sizeof(int));
            if (*passed < 0) {
                *passed = one;
            } else {
                close(one);
                *bad = 1;
            }
        }
    }
    if (mh.msg_flags & (MSG_CTRUNC | MSG_TRUNC))
        *bad = 1;
    return n;
}


int
chan_recv(int fd, enum chan_role me, char *buf, size_t cap,
    struct chan_msg *out, const char **why)
{
    ssize_t n;
    int     passed, bad;

    memset(out, 0, sizeof(*out));
    out->fd = -1;
    if (cap < 1) {
        errno = EINVAL;
        return CHAN_ESYS;
    }
    n = chan_recvmsg(fd, buf, cap - 1, &passed, &bad);
    if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK ? CHAN_AGAIN :
            CHAN_ESYS;
    if (n == 0 && passed < 0)
        return CHAN_EOF;
    if (bad) {
        *why = "truncated, or more than one descriptor";
    } else if (chan_decode(buf, (size_t)n, passed >= 0, me, out, why) ==
        CHAN_OK) {
        buf[n] = '\0';
        out->fd = passed;
        return CHAN_OK;
    }
    if (passed >= 0)
        close(passed);
    return CHAN_EBAD;
}


int
chan_serve(int fd, const struct chan_side *side, unsigned max, char *buf,
    size_t cap, void *arg)
{
    struct chan_msg m;
    const char     *why = NULL;
    unsigned        done;
    int             rc;

    for (done = 0; done < max; done++) {
        rc = chan_recv(fd, side->me, buf, cap, &m, &why);
        if (rc == CHAN_AGAIN)
            break;
        if (rc == CHAN_EOF || rc == CHAN_ESYS)
            return rc;
        if (rc == CHAN_EBAD || side->on[m.cmd] == NULL) {
            if (rc == CHAN_OK && m.fd >= 0)
                close(m.fd);
            if (side->bad != NULL)
                side->bad(rc == CHAN_EBAD ? why :
                    "a message this end has no handler for", arg);
            continue;
        }
        side->on[m.cmd](&m, arg);
    }
    return (int)done;
}
