/*
 * notify.c - the sd_notify datagram protocol, without libsystemd.
 *
 * PURPOSE   With NOTIFY_SOCKET set (a path, or "@name" for the abstract
 *           namespace), send "READY=1", "RELOADING=1", "STOPPING=1",
 *           "STATUS=..." as single datagrams to systemd.
 * CONTRACT  notify_init() reads the variable once (and unsets it so that
 *           nothing else sends by mistake); notify_send(m, ) is a no-op when
 *           it was not set.
 * FAILURE   Best effort: a lost datagram is not an error for the relay.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "common/util.h"
#include "master/master_int.h"

void
notify_init(struct master *m)
{
    struct master_notify *nt = &m->notify;
    const char *p = getenv("NOTIFY_SOCKET");
    size_t      n;

    if (p == NULL || (p[0] != '/' && p[0] != '@'))
        return;
    n = strlen(p);
    if (n >= sizeof(nt->addr.sun_path))
        return;
    memset(&nt->addr, 0, sizeof(nt->addr));
    nt->addr.sun_family = AF_UNIX;
    memcpy(nt->addr.sun_path, p, n);
    if (p[0] == '@')
        nt->addr.sun_path[0] = '\0';
    nt->len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n +
        (p[0] == '/' ? 1 : 0));
    nt->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (nt->fd >= 0)
        child_register_master_fd(m, nt->fd);
    unsetenv("NOTIFY_SOCKET");
}

void
notify_send(struct master *m, const char *fmt, ...)
{
    struct master_notify *nt = &m->notify;
    char    msg[512];
    va_list ap;
    int     n;

    if (nt->fd < 0)
        return;
    va_start(ap, fmt);
    n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (n <= 0)
        return;
    if ((size_t)n >= sizeof(msg))
        n = sizeof(msg) - 1;
    (void)sendto(nt->fd, msg, (size_t)n, MSG_NOSIGNAL,
        (struct sockaddr *)&nt->addr, nt->len);
}
