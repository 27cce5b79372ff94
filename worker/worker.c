/*
 * worker.c - placeholder worker until the event loop lands: greets each
 * connection with 220 and "421 4.3.2 not yet serving", then closes.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#include "common/util.h"
#include "config/config.h"
#include "worker/worker.h"

struct worker {
    struct worker_args a;
};

static struct worker worker_self;

struct worker *
worker_init(const struct worker_args *a)
{
    worker_self.a = *a;
    return &worker_self;
}

int
worker_run(struct worker *w)
{
    struct pollfd pf[65];
    size_t        i, n = w->a.nlisten < 64 ? w->a.nlisten : 64;
    char          reply[512];
    int           len;

    len = snprintf(reply, sizeof(reply), "220 %s ESMTP mtad\r\n"
        "421 4.3.2 not yet serving\r\n", w->a.cfg->hostname);
    (void)send(w->a.chan_fd, "ready", 5, 0);
    for (;;) {
        for (i = 0; i < n; i++)
            pf[i] = (struct pollfd){ .fd = w->a.listen_fds[i], .events = POLLIN };
        pf[n] = (struct pollfd){ .fd = w->a.chan_fd, .events = POLLIN };
        if (poll(pf, n + 1, -1) < 0 && errno != EINTR)
            return 1;
        if (pf[n].revents)
            return 0;                       /* stop, or master gone */
        for (i = 0; i < n; i++) {
            int c;

            if (!(pf[i].revents & POLLIN))
                continue;
            c = accept4(pf[i].fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (c < 0)
                continue;
            (void)send(c, reply, (size_t)len, MSG_NOSIGNAL);
            close(c);
        }
    }
}
