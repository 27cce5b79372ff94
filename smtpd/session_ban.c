/*
 * session_ban.c - limits.ban: clients that pile up errors are refused at
 * connect for a while, on every worker of the node.
 *
 * PURPOSE   Every 5xx reply a session sends (a protocol error, a failed
 *           AUTH, a rejected recipient: each once, where sess_error counts
 *           it toward limits.max_errors) counts one error for its client
 *           address (IPv6 by its limits.ipv6_prefix network) in the shared
 *           status page; limits.ban.errors of them within
 *           limits.ban.window ban the address for limits.ban.duration
 *           (status_ban_note).  The worker asks smtpd_banned() before it
 *           admits a connection: no session, no TLS, no greeting.
 * CONTRACT  Off (limits.ban.errors 0): nothing is counted; the check at
 *           connect still honours bans made by mtactl ban add (a scan of
 *           one probe window, 16 words).  relay.allow_networks and
 *           authenticated sessions are never counted, and an
 *           allow_networks client is never refused, whatever the table
 *           says.  4xx replies are not counted: they are ours (a full
 *           spool, a busy hash pool) or flow control.
 * FAILURE   A ban table window full of live bans counts nothing more.
 */
#include <stdio.h>
#include <string.h>
#include <netinet/in.h>

#include "common/log.h"
#include "common/status.h"
#include "common/util.h"
#include "config/config.h"
#include "smtpd/smtpd.h"
#include "smtpd/smtpd_int.h"

static uint32_t
sess_ban_now_s(const struct smtpd *d)
{
    return (uint32_t)(ev_now(d->loop) / 1000);
}


void
sess_ban_note(struct sess *s)
{
    const struct config    *cfg = s->d->cfg;
    struct sockaddr_storage g;
    const struct sockaddr  *sa;

    if (s->flags & SF_RELAY)
        return;                     /* allow_networks, or authenticated */
    sa = status_addr_group(&s->peer.sa, (unsigned)cfg->ipv6_prefix, &g);
    if (!status_ban_note(s->d->shared, sa, sess_ban_now_s(s->d),
        (uint32_t)(cfg->ban_window_ms / 1000), (unsigned)cfg->ban_errors,
        (uint32_t)(cfg->ban_duration_ms / 1000)))
        return;
    log_ev(LOGL_WARN, "ban", LOG_KVS(SESS_CLIENT(s),
        LKV_I("errors", cfg->ban_errors),
        LKV_I("duration_s", (long long)(cfg->ban_duration_ms / 1000))),
        "ban: [%s] banned for %llus after %d errors (limits.ban); "
        "session=%s", s->ip,
        (unsigned long long)(cfg->ban_duration_ms / 1000), cfg->ban_errors,
        s->sid);
}


/* smtpd_ban_allowed - sa (maybe v4-mapped) is in relay.allow_networks. */
static int
smtpd_ban_allowed(const struct config *cfg, const struct sockaddr *sa)
{
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
    struct sockaddr_in         v4;
    size_t                     i;

    if (sa->sa_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
        memset(&v4, 0, sizeof(v4));
        v4.sin_family = AF_INET;
        memcpy(&v4.sin_addr, &s6->sin6_addr.s6_addr[12], 4);
        sa = (const struct sockaddr *)&v4;
    }
    for (i = 0; i < cfg->nallow_networks; i++)
        if (util_cidr_match(&cfg->allow_networks[i], sa))
            return 1;
    return 0;
}


int
smtpd_banned(struct smtpd *d, const struct sockaddr *sa, char *text,
    size_t tsz)
{
    const struct config    *cfg = d->cfg;
    struct sockaddr_storage g;
    char                    ip[INET6_ADDRSTRLEN];

    if (d->shared == NULL || !status_ban_check(d->shared,
        status_addr_group(sa, (unsigned)cfg->ipv6_prefix, &g),
        sess_ban_now_s(d)) || smtpd_ban_allowed(cfg, sa))
        return 0;
    util_sockaddr_ip(sa, ip, sizeof(ip));
    snprintf(text, tsz, "421 4.7.0 %s Too many errors from your address, "
        "try later\r\n", cfg->hostname);
    STATUS_ADD(d->st->ops.rejects[STATUS_REJ_BANNED], 1);
    log_ev(LOGL_INFO, "reject", LOG_KVS(LKV_S("client", ip),
        LKV_S("reason", "banned"), LKV_S("dsn", "4.7.0")),
        "refused [%s]: banned (limits.ban, mtactl ban)", ip);
    return 1;
}
