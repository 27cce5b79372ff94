/*
 * hosts.c - "hosts" on the control socket (mtactl hosts): the next hops
 * the node's workers found not answering (delivery.host_down_for), from
 * the health table on the shared status page (common/status_health.c).
 *
 * CONTRACT  Read-only.  One line per hop not forgotten: "ADDR:PORT" (IPv6
 *           in brackets), its state (down: skipped until its time ends;
 *           probe-due: the next connection probes it; probing: one does),
 *           until= (UTC) and left=, failures= (failed probes + 1 in this
 *           episode), since= (seconds since it went down) and error= (its
 *           last error, escaped again here: it holds a peer's words).
 * FAILURE   None: an empty table answers "ok" alone.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "common/buf.h"
#include "common/status.h"
#include "common/util.h"
#include "config/config.h"
#include "master/master_int.h"
#include "master/ops.h"

#define HOSTS_LIST_MAX STATUS_HOP_SLOTS

/* hosts_forget_s - delivery.host_down_max in seconds, as the workers
 * forget entries (mta_set_health()). */
uint32_t
hosts_forget_s(const struct config *cfg)
{
    uint32_t s = (uint32_t)((cfg->host_down_max_ms + 999) / 1000);
    uint32_t d = (uint32_t)((cfg->host_down_for_ms + 999) / 1000);

    return s > d ? s : d;
}


static void
hosts_line(struct buf *t, const struct status_hop *h, uint64_t wall_ms)
{
    const struct sockaddr *sa = (const struct sockaddr *)&h->addr;
    char        ip[INET6_ADDRSTRLEN + 8], err[UTIL_ESC_ROOM(STATUS_HOP_ERR)];
    char        until[32];
    time_t      u = (time_t)(wall_ms / 1000) + (h->left_s > 0 ? h->left_s : 0);
    struct tm   tm;
    unsigned    port = sa->sa_family == AF_INET ?
        ntohs(((const struct sockaddr_in *)sa)->sin_port) :
        ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
    const char *state = h->left_s > 0 ? (h->probing ? "probing" : "down") :
        "probe-due";

    util_sockaddr_ip(sa, ip, sizeof(ip));
    (void)util_escape(err, sizeof(err), h->err, strlen(h->err), 0, NULL);
    if (gmtime_r(&u, &tm) == NULL ||
        strftime(until, sizeof(until), "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        util_strlcpy(until, "-", sizeof(until));
    buf_printf(t, "%s%s%s:%u state=%s until=%s left=%ds failures=%u "
        "since=%us error=\"%s\"\n", sa->sa_family == AF_INET6 ? "[" : "", ip,
        sa->sa_family == AF_INET6 ? "]" : "", port, state, until,
        h->left_s > 0 ? (int)h->left_s : 0, h->failures, (unsigned)h->down_s,
        err);
}


void
ctl_hosts(struct master *m, char **out)
{
    struct status_hop *h = xcalloc(HOSTS_LIST_MAX, sizeof(*h));
    struct buf         t;
    uint32_t           now_s = (uint32_t)(util_now_ms() / 1000);
    uint64_t           wall = util_wall_ms();
    size_t             n, i;

    buf_init(&t);
    n = status_hop_list(m->status, now_s, hosts_forget_s(m->cur->cfg), h,
        HOSTS_LIST_MAX);
    buf_printf(&t, "ok\n");
    for (i = 0; i < n; i++)
        hosts_line(&t, &h[i], wall);
    free(h);
    *out = t.data;
}
