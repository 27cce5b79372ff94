/*
 * transport.h - the byte transport under an SMTP session: read, write,
 * close.  Plain sockets now; STARTTLS slots in here later (an SSL * next to
 * the fd) without touching the protocol code.
 *
 * CONTRACT  The fd is non-blocking.  transport_read() returns bytes read,
 *           0 at end of stream, MTA_AGAIN when nothing is there, or -1
 *           (errno kept).  transport_write()/_writev() return bytes
 *           written (possibly short), MTA_AGAIN, or -1; they never raise
 *           SIGPIPE.  transport_close() closes the fd; the caller unwatches
 *           it first.
 * FAILURE   Never logs.
 */
#ifndef MTAD_TRANSPORT_H
#define MTAD_TRANSPORT_H

#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

struct transport {
    int     fd;
};

void    transport_init(struct transport *t, int fd);
ssize_t transport_read(struct transport *t, void *p, size_t n);
ssize_t transport_write(struct transport *t, const void *p, size_t n);
ssize_t transport_writev(struct transport *t, const struct iovec *iov,
            int iovcnt);
void    transport_close(struct transport *t);

#endif /* MTAD_TRANSPORT_H */
