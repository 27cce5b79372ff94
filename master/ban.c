/*
 * ban.c - "ban list", "ban add ADDR [SECONDS]", "ban del ADDR" on the
 * control socket (mtactl ban): the node's ban table on the shared status
 * page (common/status.h, limits.ban), which the master writes here and
 * every worker reads at connect.
 *
 * CONTRACT  ADDR is an IPv4 or IPv6 address; IPv6 is grouped by
 *           limits.ipv6_prefix as the workers count it, and the answer
 *           names the network.  SECONDS 0 or none: limits.ban.duration.
 *           "ban list" answers one line per ban: "ADDR left=Ns".
 *           The admin record (who, what) is audit_request()'s, as for
 *           every state-changing request; "ban list" is read-only.
 * FAILURE   A bad request answers "error: ..." and changes nothing.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "common/buf.h"
#include "common/status.h"
#include "common/util.h"
#include "config/config.h"
#include "master/master_int.h"
#include "master/ops.h"

#define BAN_LIST_MAX 4096           /* lines in one "ban list" answer */

/* ban_addr - text to a grouped address; -1 when not an IP address. */
static int
ban_addr(const struct config *cfg, const char *text,
    struct sockaddr_storage *out, char *shown, size_t shsz)
{
    struct sockaddr_storage ss;
    struct sockaddr_in     *s4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6    *s6 = (struct sockaddr_in6 *)&ss;

    memset(&ss, 0, sizeof(ss));
    if (inet_pton(AF_INET, text, &s4->sin_addr) == 1)
        s4->sin_family = AF_INET;
    else if (inet_pton(AF_INET6, text, &s6->sin6_addr) == 1)
        s6->sin6_family = AF_INET6;
    else
        return -1;
    (void)status_addr_group((struct sockaddr *)&ss,
        (unsigned)cfg->ipv6_prefix, out);
    util_sockaddr_ip((struct sockaddr *)out, shown, shsz);
    if (out->ss_family == AF_INET6 && cfg->ipv6_prefix < 128)
        snprintf(shown + strlen(shown), shsz - strlen(shown), "/%d",
            cfg->ipv6_prefix);
    return 0;
}


static void
ban_list(struct master *m, struct buf *t, uint32_t now_s)
{
    struct status_ban *b = xcalloc(BAN_LIST_MAX, sizeof(*b));
    char               ip[INET6_ADDRSTRLEN + 8];
    size_t             n, i;

    n = status_ban_list(m->status, now_s, b, BAN_LIST_MAX);
    buf_printf(t, "ok\n");
    for (i = 0; i < n; i++) {
        util_sockaddr_ip((struct sockaddr *)&b[i].addr, ip, sizeof(ip));
        buf_printf(t, "%s left=%us\n", ip, (unsigned)b[i].left_s);
    }
    free(b);
}


void
ctl_ban(struct master *m, const char *arg, char **out)
{
    const struct config    *cfg = m->cur->cfg;
    struct sockaddr_storage g;
    struct buf              t;
    char                    addr[64], shown[INET6_ADDRSTRLEN + 8], *end;
    unsigned long long      secs = 0;
    uint32_t                now_s = (uint32_t)(util_now_ms() / 1000);
    int                     add = strncmp(arg, "add ", 4) == 0, n;
    size_t                  len;

    buf_init(&t);
    if (strcmp(arg, "list") == 0) {
        ban_list(m, &t, now_s);
        *out = t.data;
        return;
    }
    if (!add && strncmp(arg, "del ", 4) != 0)
        goto bad;
    arg += 4;
    len = strcspn(arg, " ");
    if (len == 0 || len >= sizeof(addr))
        goto bad;
    memcpy(addr, arg, len);
    addr[len] = '\0';
    arg += len;
    if (add && *arg == ' ') {
        errno = 0;
        if (arg[1] < '0' || arg[1] > '9')
            goto bad;
        secs = strtoull(arg + 1, &end, 10);
        if (*end != '\0' || errno == ERANGE)
            goto bad;
        arg = end;
    }
    if (*arg != '\0' || ban_addr(cfg, addr, &g, shown, sizeof(shown)) < 0)
        goto bad;
    if (!add) {
        n = status_ban_del(m->status, (struct sockaddr *)&g, now_s);
        /* and on every node of a cluster (it may be another's ban) */
        if (master_cluster_unban(m, (struct sockaddr *)&g) && n == 0)
            n = 1;
        buf_printf(&t, n > 0 ? "ok\n%s: ban lifted\n" :
            "error: %s: not banned\n", shown);
    } else {
        if (secs == 0)
            secs = cfg->ban_duration_ms / 1000;
        if (secs > STATUS_BAN_MAX_S)
            secs = STATUS_BAN_MAX_S;
        if (status_ban_add(m->status, (struct sockaddr *)&g, now_s,
            (uint32_t)secs) < 0)
            buf_printf(&t, "error: %s: the ban table is full there\n",
                shown);
        else
            buf_printf(&t, "ok\n%s: banned for %llus\n", shown, secs);
    }
    *out = t.data;
    return;
bad:
    buf_printf(&t, "error: ban: expected list, add ADDR [SECONDS] or del "
        "ADDR\n");
    *out = t.data;
}
