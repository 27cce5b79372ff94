/*
 * session_quota.c - queue quotas at RCPT and DATA (quotas section).
 *
 * PURPOSE   Over a key's message quota (its sender domain, the recipient's
 *           domain, its AUTH user, its client network), the RCPT is
 *           answered "452 4.3.1 Quota exceeded: ..." naming the kind, the
 *           key, the count and the quota; over a bytes quota, DATA (or the
 *           first BDAT) is.  The counts are the node's, summed over the
 *           workers' columns (delivery/quota.c); the limits are
 *           relay.yaml's unless mtactl quota set overrode them.
 * CONTRACT  Off when relay.yaml has no quota (nothing is counted then).
 *           A message counts from its commit, so messages accepted at the
 *           same time may pass a quota by their number (the check and the
 *           count are not one step); a bytes check adds the message's
 *           SIZE= when the client gave one, so a quota is passed by at
 *           most one message's size otherwise.  The 452 is flow control
 *           (not a limits.max_errors error).  The first 452 of a key logs
 *           the start of its episode; delivery logs its end, once the key
 *           is under again.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "common/status.h"
#include "common/util.h"
#include "config/config.h"
#include "delivery/delivery.h"
#include "smtpd/smtpd.h"
#include "smtpd/smtpd_int.h"

static const char *const sess_quota_words[STATUS_QK_MAX] = {
    "sender domain", "recipient domain", "user", "client network"
};

int
sess_quota_on(const struct smtpd *d)
{
    const struct config *cfg = d->cfg;
    int                  i;

    if (d->shared == NULL)
        return 0;
    for (i = 0; i < CONFIG_QUOTA_KINDS; i++)
        if (cfg->quota_msgs[i] != 0 || cfg->quota_bytes[i] != 0)
            return 1;
    return 0;
}


/* sess_quota_episode - the first 452 of an episode logs it. */
static void
sess_quota_episode(struct sess *s, unsigned kind, const char *key, int row,
    const char *what, int64_t used, uint64_t lim)
{
    struct status_quota_row *q = &s->d->shared->quota[row];
    uint32_t                 off = 0;

    if (!__atomic_compare_exchange_n(&q->over, &off, 1, 0, __ATOMIC_ACQ_REL,
        __ATOMIC_RELAXED))
        return;
    log_ev(LOGL_WARN, "quota", LOG_KVS(LKV_S("kind",
        status_quota_kind_name(kind)), LKV_S("key", key),
        LKV_S("episode", "start"), LKV_S("quota", what)),
        "quota: %s %s is over its %s quota (%" PRId64 " queued, quota %"
        PRIu64 "): new mail for it gets 452 4.3.1; session=%s",
        status_quota_kind_name(kind), key, what, used, lim, s->sid);
}


/* sess_quota_over - (kind, v) at or over its message quota (bytes 0) or
 * its bytes quota with extra bytes more (bytes 1): 1 with the reply in
 * s->qerr, logged and counted; else 0. */
static int
sess_quota_over(struct sess *s, unsigned kind, const char *v, int bytes,
    uint64_t extra)
{
    struct smtpd           *d = s->d;
    struct status_quota_use u;
    char                    key[STATUS_QUOTA_KEY_MAX + 1];
    uint64_t                lim;
    int64_t                 used;
    size_t                  n;
    int                     row;

    if ((n = deliver_quota_key(d->cfg, kind, v, key)) == 0)
        return 0;
    status_quota_sum(d->shared, kind, key, n, &u, &row);
    lim = deliver_quota_limit(d->cfg, d->shared, kind, bytes ? u.lim_bytes :
        u.lim_msgs, bytes);
    used = bytes ? u.bytes : u.msgs;
    if (lim == 0)
        return 0;
    if (bytes && extra > 0 ? used + (int64_t)extra <= (int64_t)lim :
        used < (int64_t)lim)
        return 0;
    STATUS_ADD(d->shared->quota_rejects[kind], 1);
    if (row >= 0)                   /* none: only SIZE= was over */
        sess_quota_episode(s, kind, key, row, bytes ? "bytes" : "message",
            used, lim);
    snprintf(s->qerr, sizeof(s->qerr), "452 4.3.1 Quota exceeded: %s %s "
        "has %" PRId64 " %s queued (quota %" PRIu64 "), try again later",
        sess_quota_words[kind], key, used, bytes ? "bytes" : "messages",
        lim);
    log_ev(LOGL_INFO, "reject", LOG_KVS(SESS_CLIENT(s),
        LKV_S("reason", "quota"), LKV_S("dsn", "4.3.1"),
        LKV_S("kind", status_quota_kind_name(kind)), LKV_S("key", key)),
        "reject: %s from [%s]:%u: %s; session=%s", bytes ? "DATA" : "RCPT",
        s->ip, (unsigned)s->port, s->qerr, s->sid);
    return 1;
}


int
sess_quota_rcpt(struct sess *s, const char *addr)
{
    const struct sess_txn *t = s->txn;

    if (!sess_quota_on(s->d))
        return 0;
    if (sess_quota_over(s, STATUS_QK_RCPT, addr, 0, 0) ||
        sess_quota_over(s, STATUS_QK_SENDER, t->env.sender, 0, 0) ||
        sess_quota_over(s, STATUS_QK_USER, t->env.auth_user, 0, 0) ||
        sess_quota_over(s, STATUS_QK_NET, s->ip, 0, 0)) {
        sess_reply_flow(s, s->qerr);
        return -1;
    }
    return 0;
}


const char *
sess_quota_data(struct sess *s)
{
    const struct sess_txn *t = s->txn;
    uint64_t               x = t->size_decl;
    size_t                 i;

    if (!sess_quota_on(s->d))
        return NULL;
    if (sess_quota_over(s, STATUS_QK_SENDER, t->env.sender, 1, x) ||
        sess_quota_over(s, STATUS_QK_USER, t->env.auth_user, 1, x) ||
        sess_quota_over(s, STATUS_QK_NET, s->ip, 1, x))
        return s->qerr;
    for (i = 0; i < t->env.nrcpt; i++)
        if (sess_quota_over(s, STATUS_QK_RCPT, t->env.rcpt[i].addr, 1, x))
            return s->qerr;
    return NULL;
}
