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
 * PATH      The master connects as root, so it connects only a socket whose
 *           directory nobody but root (or the master's euid) can change
 *           (safefs_dir_trusted: no one else could put a fake auth server
 *           there, whose every OK would be a login that may relay), and
 *           it connects through that directory's descriptor
 *           (/proc/self/fd/N/NAME), so the directory checked is the one
 *           connected in, whatever is renamed meanwhile.
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
#include "common/safefs.h"
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


/* master_auth_open - path connected, through its trusted directory; the
 * socket, or -1 with why in err. */
static int
master_auth_open(const char *path, char *err, size_t errsz)
{
    struct sockaddr_un sun;
    const char        *name;
    int                dfd, fd = -1, n;

    dfd = safefs_open_parent(path, &name, err, errsz);
    if (dfd < 0)
        return -1;
    if (safefs_dir_trusted(dfd, path, err, errsz) != 0) {
        close(dfd);
        return -1;
    }
    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    n = snprintf(sun.sun_path, sizeof(sun.sun_path), "/proc/self/fd/%d/%s",
        dfd, name);
    if (n < 0 || (size_t)n >= sizeof(sun.sun_path))
        snprintf(err, errsz, "%s: the name is too long", path);
    else if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK |
        SOCK_CLOEXEC, 0)) < 0)
        snprintf(err, errsz, "socket: %s", strerror(errno));
    else if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) != 0) {
        snprintf(err, errsz, "%s", strerror(errno));
        close(fd);
        fd = -1;
    }
    close(dfd);
    return fd;
}


void
master_auth_connect(struct master *m, struct slot *s, unsigned idx)
{
    struct generation      *g = master_gen_by_id(m, s->generation);
    struct sockaddr_storage ss;
    unsigned                sslen;
    const char             *why;
    uint64_t                now = util_now_ms();
    char                    err[512];
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
    fd = master_auth_open(((struct sockaddr_un *)&ss)->sun_path, err,
        sizeof(err));
    if (fd < 0) {
        master_auth_refuse(s, err);
        return;
    }
    if (chan_send(s->chan, CHAN_AUTH_SOCKET, NULL, 0, fd) < 0)
        log_warn("worker %u: cannot pass the dovecot socket: %s", s->shard,
            strerror(errno));
    close(fd);
}
