/*
 * ctl.c - the client side of the control protocol (see ctl.h).
 *
 * PURPOSE   One request, one reply: connect to the master's unix socket,
 *           send a line, read until the server closes.
 * CONTRACT  Blocking I/O bounded by poll() against a deadline.
 * FAILURE   Never logs; returns CTL_* with errno kept on CTL_ESYS.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "common/util.h"
#include "common/ctl.h"

/* Milliseconds left before deadline (monotonic), -1 when unbounded. */
static int
ctl_left(uint64_t deadline)
{
    uint64_t now;

    if (deadline == 0)
        return -1;
    now = util_now_ms();
    return now >= deadline ? 0 : (int)(deadline - now);
}

static int
ctl_wait(int fd, short events, uint64_t deadline)
{
    struct pollfd pf = { .fd = fd, .events = events };
    int           r;

    for (;;) {
        r = poll(&pf, 1, ctl_left(deadline));
        if (r > 0)
            return 0;
        if (r == 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        if (errno != EINTR)
            return -1;
    }
}

static int
ctl_connect(const char *sockpath)
{
    struct sockaddr_un sun;
    int                fd;

    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    if (strlen(sockpath) >= sizeof(sun.sun_path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(sun.sun_path, sockpath, strlen(sockpath));
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
        int e = errno;

        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

static int
ctl_send_line(int fd, const char *request, uint64_t deadline)
{
    char    line[CTL_REQUEST_MAX + 1];
    size_t  n = strlen(request), off = 0;
    ssize_t w;

    if (n >= CTL_REQUEST_MAX) {
        errno = EMSGSIZE;
        return -1;
    }
    memcpy(line, request, n);
    line[n++] = '\n';
    while (off < n) {
        if (ctl_wait(fd, POLLOUT, deadline) < 0)
            return -1;
        w = send(fd, line + off, n - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno != EINTR && errno != EAGAIN)
            return -1;
        if (w > 0)
            off += (size_t)w;
    }
    return 0;
}

/* Reads until EOF into a malloc'd string. */
static int
ctl_read_all(int fd, uint64_t deadline, char **out)
{
    size_t  len = 0, cap = 4096;
    char   *p = xmalloc(cap);
    ssize_t r;

    for (;;) {
        if (len + 1 >= cap) {
            if (cap >= CTL_REPLY_MAX)
                break;
            cap *= 2;
            p = xrealloc(p, cap);
        }
        if (ctl_wait(fd, POLLIN, deadline) < 0)
            goto fail;
        r = recv(fd, p + len, cap - len - 1, MSG_DONTWAIT);
        if (r == 0)
            break;
        if (r < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            goto fail;
        }
        len += (size_t)r;
    }
    p[len] = '\0';
    *out = p;
    return 0;
fail:
    free(p);
    return -1;
}

int
ctl_request(const char *sockpath, const char *request, int timeout_ms,
    char **reply)
{
    uint64_t deadline = timeout_ms < 0 ? 0 : util_now_ms() + (uint64_t)timeout_ms;
    char    *r = NULL;
    int      fd, e;

    *reply = NULL;
    fd = ctl_connect(sockpath);
    if (fd < 0)
        return CTL_ESYS;
    if (ctl_send_line(fd, request, deadline) < 0 ||
        ctl_read_all(fd, deadline, &r) < 0) {
        e = errno;
        close(fd);
        errno = e;
        return CTL_ESYS;
    }
    close(fd);
    *reply = r;
    if (strncmp(r, "ok\n", 3) == 0 || strcmp(r, "ok") == 0)
        return CTL_OK;
    if (strncmp(r, "error:", 6) == 0)
        return CTL_EREFUSED;
    return CTL_EPROTO;
}

const char *
ctl_reply_body(const char *reply)
{
    const char *nl = strchr(reply, '\n');

    return nl != NULL ? nl + 1 : "";
}
