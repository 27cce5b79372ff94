/*
 * transport.c - plain-socket transport for SMTP sessions.
 *
 * CONTRACT  See transport.h.  EINTR is retried; EAGAIN becomes MTA_AGAIN.
 * FAILURE   Never logs; -1 with errno kept.
 */
#include <errno.h>
#include <unistd.h>
#include <sys/socket.h>

#include "common/util.h"
#include "worker/transport.h"


void
transport_init(struct transport *t, int fd)
{
    t->fd = fd;
}


ssize_t
transport_read(struct transport *t, void *p, size_t n)
{
    ssize_t r;

    do
        r = recv(t->fd, p, n, 0);
    while (r < 0 && errno == EINTR);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return MTA_AGAIN;
    return r;
}


ssize_t
transport_write(struct transport *t, const void *p, size_t n)
{
    ssize_t r;

    do
        r = send(t->fd, p, n, MSG_NOSIGNAL);
    while (r < 0 && errno == EINTR);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return MTA_AGAIN;
    return r;
}


ssize_t
transport_writev(struct transport *t, const struct iovec *iov, int iovcnt)
{
    struct msghdr mh = { .msg_iov = (struct iovec *)iov,
                         .msg_iovlen = (size_t)iovcnt };
    ssize_t       r;

    do
        r = sendmsg(t->fd, &mh, MSG_NOSIGNAL);
    while (r < 0 && errno == EINTR);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return MTA_AGAIN;
    return r;
}


void
transport_close(struct transport *t)
{
    if (t->fd >= 0)
        close(t->fd);
    t->fd = -1;
}
