/*
 * auth_connect.c - the master connects Dovecot's auth socket for a worker
 * (auth.backend: dovecot with a unix socket).
 *
 * WHY       A worker's seccomp filter refuses it new unix sockets
 *           (common/sandbox.c): with one it could connect to any socket on
 *           the host that its Landlock rules do not cover.  Widening the
 *           filter to "AF_UNIX, but only for this path" cannot be said in
 *           seccomp (it sees no paths), and a socket opened before the
 *           lock-down could not be opened again after Dovecot restarts.
 *           So the worker asks (CHAN_AUTH_CONNECT, no payload) and the
 *           master connects the one path auth.dovecot_socket names in the
 *           worker's own generation's config: nothing the worker sends
 *           chooses what is connected, so the most a compromised worker
 *           gets is more connections to Dovecot's auth-client socket,
 *           which it was given anyway.  The master connects as root:
 *           the socket need not be open to the workers' user.
 * LIMITS    At most one connect per worker per MASTER_AUTH_GAP_MS (the
 *           worker backs off on its own; this bounds a worker that does
 *           not); a request past it is refused with a reason.  The connect
 *           is non-blocking: a unix stream connect completes or fails at
 *           once (EAGAIN when Dovecot's backlog is full: refused, the
 *           worker tries again).
 * ANSWER    CHAN_AUTH_SOCKET with the connected descriptor, or
 *           CHAN_AUTH_REFUSED with why (strerror text).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "common/chan.h"
#include "common/log.h"
#include "common/util.h"
#include "config/config.h"
#include "master/master_int.h"

#define MASTER_AUTH_GAP_MS 50

static uint64_t master_auth_last[MASTER_MAX_SLOTS];


static void
master_auth_refuse(struct slot *s, const char *why)
{
    (void)chan_send(s->chan, CHAN_AUTH_REFUSED, why, strlen(why), -1);
}


void
master_auth_connect(struct master *m, struct slot *s, unsigned idx)
{
    struct generation      *g = master_gen_by_id(m, s->generation);
    struct sockaddr_storage ss;
    unsigned                sslen;
    const char             *why;
    uint64_t                now = util_now_ms();
    int                     fd;

    if (g == NULL || !config_auth_dovecot(g->cfg) ||
        g->cfg->auth_dovecot_socket == NULL ||
        config_dovecot_addr(g->cfg->auth_dovecot_socket, &ss, &sslen,
        &why) < 0 || ss.ss_family != AF_UNIX) {
        master_auth_refuse(s, "no unix auth.dovecot_socket in this "
            "worker's config");
        return;
    }
    if (idx < MASTER_MAX_SLOTS) {
        if (master_auth_last[idx] != 0 &&
            now - master_auth_last[idx] < MASTER_AUTH_GAP_MS) {
            master_auth_refuse(s, "asked again too soon");
            return;
        }
        master_auth_last[idx] = now;
    }
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        master_auth_refuse(s, strerror(errno));
        return;
    }
    if (connect(fd, (struct sockaddr *)&ss, sslen) != 0) {
        master_auth_refuse(s, strerror(errno));
        close(fd);
        return;
    }
    if (chan_send(s->chan, CHAN_AUTH_SOCKET, NULL, 0, fd) < 0)
        log_warn("worker %u: cannot pass the dovecot socket: %s", s->shard,
            strerror(errno));
    close(fd);
}
