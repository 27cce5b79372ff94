/*
 * listen.c - the listening sockets, shared by all workers of a generation
 * and kept open by the master across reloads.
 *
 * PURPOSE   One socket per configured address, bound by the master before
 *           any privilege change: SO_REUSEADDR, IPV6_V6ONLY for v6,
 *           non-blocking, backlog somaxconn (at least 4096).  Every worker
 *           inherits the fd and waits on it with EPOLLEXCLUSIVE: one shared
 *           accept queue.  Not SO_REUSEPORT per worker: its per-socket
 *           queues lose (reset) the connections waiting on the socket of a
 *           worker that dies or retires at a reload, hash new connections
 *           to a stuck worker, and would need root (port 25) at every
 *           respawn; and it bought no throughput in our runs, only a more
 *           even split of connections (bench/RESULTS.md).
 * CONTRACT  listen_acquire() gives one fd per cfg->listen entry; an address
 *           that is already bound (same sockaddr) reuses the same fd, so a
 *           reload never closes a socket that keeps its address: no
 *           connection is refused during the swap.  listen_release() drops
 *           the references; the socket closes with the last one.
 *           listen_inject() adds the HTTP API's injection socket after
 *           them (config_inject_listen), shared across reloads the same
 *           way, when the API is on.
 * FAILURE   -1 and "cannot listen on SPEC: <why>" in err; nothing is held.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "common/safefs.h"
#include "common/util.h"
#include "config/config.h"
#include "master/master_int.h"

#define LISTEN_BACKLOG   4096

static int
listen_backlog(void)
{
    char buf[32];
    int  fd, n = LISTEN_BACKLOG;
    ssize_t r;

    fd = open("/proc/sys/net/core/somaxconn", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        r = read(fd, buf, sizeof(buf) - 1);
        if (r > 0) {
            buf[r] = '\0';
            if (atoi(buf) > n)
                n = atoi(buf);
        }
        close(fd);
    }
    return n;
}

static struct listener *
listen_find(struct master *m, const struct config_listen *cl)
{
    for (size_t i = 0; i < LISTEN_MAX; i++) {
        struct listener *l = &m->listeners[i];

        if (l->refs > 0 && l->addrlen == cl->addrlen &&
            memcmp(&l->addr, &cl->addr, cl->addrlen) == 0)
            return l;
    }
    return NULL;
}

static int
listen_bind(const struct config_listen *cl, char *err, size_t errsz)
{
    int fd, on = 1;

    fd = socket(cl->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
        0);
    if (fd < 0)
        goto fail;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) < 0)
        goto fail;
    if (cl->addr.ss_family == AF_INET6 &&
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof(on)) < 0)
        goto fail;
    if (bind(fd, (const struct sockaddr *)&cl->addr, cl->addrlen) < 0)
        goto fail;
    /* No Nagle on every session (see worker_accept_one): Linux copies the
     * listener's TCP_NODELAY into each accepted socket, which saves the
     * workers a setsockopt() per connection.  Best effort: a worker that
     * finds it off sets it itself. */
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
    if (listen(fd, listen_backlog()) < 0)
        goto fail;
    return fd;
fail:
    snprintf(err, errsz, "cannot listen on %s: %s", cl->spec, strerror(errno));
    if (fd >= 0)
        close(fd);
    return -1;
}

static void
listen_unref(struct master *m, int fd)
{
    for (size_t i = 0; i < LISTEN_MAX; i++) {
        struct listener *l = &m->listeners[i];

        if (l->refs > 0 && l->fd == fd) {
            if (--l->refs == 0) {
                child_unregister_master_fd(m, l->fd);
                close(l->fd);
                if (l->addr.ss_family == AF_UNIX)  /* the injection socket */
                    (void)unlink(l->spec);
                free(l->spec);
                memset(l, 0, sizeof(*l));
            }
            return;
        }
    }
}

int
listen_acquire(struct master *m, const struct config *cfg, int **fdsp,
    char *err, size_t errsz)
{
    int   *fds = xcalloc(cfg->nlisten ? cfg->nlisten : 1, sizeof(int));
    size_t i, j;

    for (i = 0; i < cfg->nlisten; i++) {
        const struct config_listen *cl = &cfg->listen[i];
        struct listener            *l = listen_find(m, cl);

        if (l == NULL) {
            for (j = 0; j < LISTEN_MAX && m->listeners[j].refs > 0; j++)
                ;
            if (j == LISTEN_MAX) {
                snprintf(err, errsz, "cannot listen on %s: more than %d "
                    "addresses", cl->spec, LISTEN_MAX);
                goto fail;
            }
            l = &m->listeners[j];
            l->fd = listen_bind(cl, err, errsz);
            if (l->fd < 0)
                goto fail;
            l->addr = cl->addr;
            l->addrlen = cl->addrlen;
            l->spec = xstrdup(cl->spec);
            child_register_master_fd(m, l->fd);
        }
        l->refs++;
        fds[i] = l->fd;
    }
    *fdsp = fds;
    return 0;
fail:
    listen_release(m, fds, i);
    free(fds);
    return -1;
}

void
listen_release(struct master *m, int *fds, size_t n)
{
    for (size_t i = 0; i < n; i++)
        listen_unref(m, fds[i]);
}


/*
 * listen_inject_bind - the injection socket: in the control socket's
 * directory (one only root can change, checked as ctl_listen does), born
 * mode 0600 (umask around bind), then given to server.user: the API
 * process and the workers run as that user, nobody else connects.  A
 * socket file left by a crash is replaced; a live one (another mtad)
 * refuses the start.
 */
static int
listen_inject_bind(const struct config_listen *cl, const struct privs *p,
    char *err, size_t errsz)
{
    const struct sockaddr_un *sun = (const struct sockaddr_un *)&cl->addr;
    const char *name;
    char        what[512];
    struct stat st;
    mode_t      old;
    int         fd = -1, dfd, probe, rc;

    master_mkparent(cl->spec);
    if ((dfd = safefs_open_parent(cl->spec, &name, what, sizeof(what))) < 0 ||
        safefs_dir_trusted(dfd, cl->spec, what, sizeof(what)) < 0) {
        snprintf(err, errsz, "cannot listen on %s: %s", cl->spec, what);
        goto fail;
    }
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            snprintf(err, errsz, "cannot listen on %s: exists and is not a "
                "socket; left alone", cl->spec);
            goto fail;
        }
        probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (probe >= 0 && connect(probe, (const struct sockaddr *)sun,
            cl->addrlen) == 0) {
            close(probe);
            snprintf(err, errsz, "cannot listen on %s: it answers: is "
                "another mtad running?", cl->spec);
            goto fail;
        }
        if (probe >= 0)
            close(probe);
        (void)unlinkat(dfd, name, 0);
    }
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    old = umask(0177);
    rc = fd < 0 ? -1 : bind(fd, (const struct sockaddr *)sun, cl->addrlen);
    (void)umask(old);
    if (rc < 0 || (p->drop && fchownat(dfd, name, p->uid, p->gid,
        AT_SYMLINK_NOFOLLOW) < 0) || listen(fd, listen_backlog()) < 0) {
        snprintf(err, errsz, "cannot listen on %s: %s", cl->spec,
            strerror(errno));
        goto fail;
    }
    close(dfd);
    return fd;
fail:
    if (fd >= 0)
        close(fd);
    if (dfd >= 0)
        close(dfd);
    return -1;
}


int
listen_inject(struct master *m, const struct config *cfg,
    const struct privs *p, int **fdsp, size_t *np, char *err, size_t errsz)
{
    struct config_listen cl;
    struct listener     *l;
    char                 spec[sizeof(((struct sockaddr_un *)0)->sun_path)];
    size_t               j;

    if (!config_inject_on(cfg))
        return 0;
    if (config_inject_listen(cfg, &cl, spec, sizeof(spec)) < 0) {
        snprintf(err, errsz, "cannot listen on the injection socket next to "
            "%s: path too long", cfg->control_socket);
        return -1;
    }
    l = listen_find(m, &cl);
    if (l == NULL) {
        for (j = 0; j < LISTEN_MAX && m->listeners[j].refs > 0; j++)
            ;
        if (j == LISTEN_MAX) {
            snprintf(err, errsz, "cannot listen on %s: more than %d "
                "addresses", cl.spec, LISTEN_MAX);
            return -1;
        }
        l = &m->listeners[j];
        l->fd = listen_inject_bind(&cl, p, err, errsz);
        if (l->fd < 0)
            return -1;
        l->addr = cl.addr;
        l->addrlen = cl.addrlen;
        l->spec = xstrdup(cl.spec);
        child_register_master_fd(m, l->fd);
    }
    l->refs++;
    *fdsp = xrealloc(*fdsp, (*np + 1) * sizeof(int));
    (*fdsp)[(*np)++] = l->fd;
    return 0;
}
