/*
 * quota.c - queue quotas' usage, counted by the worker that holds the
 * messages (quotas section; common/status_quota.c).
 *
 * PURPOSE   Each message of this worker's queue index counts one message
 *           and its body bytes for each of its keys: its sender domain,
 *           every distinct recipient domain, its AUTH user and its client
 *           network, in this worker's column of the node's rows.  The
 *           index takes a message's share when it first sees its envelope
 *           (the commit, an attempt, the rebuild at start or at a kick)
 *           and gives it back when the entry goes (the message left the
 *           spool, or mtactl removed it): so the counts follow the files.
 * CONTRACT  A message's keys never change, so its rows are taken once
 *           (dq_take) and kept with its index entry (dq_release).  The
 *           column is this worker's slot's alone: zeroed at its start and
 *           at a stop (the next generation counts the shard again), and by
 *           the master when the worker is gone.  The end of an episode
 *           (a key back under its quotas) is logged here, once (the
 *           row's over flag, cleared with a compare-and-swap).
 * FAILURE   A key that finds no row (a full table) is not counted.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "common/log.h"
#include "common/status.h"
#include "common/util.h"
#include "config/config.h"
#include "spool/spool.h"
#include "delivery/delivery.h"
#include "delivery/delivery_int.h"

#define DQ_MAX_KEYS 64              /* rows one message takes at most */

struct dq_rows {
    struct status_page  *sp;
    const struct config *cfg;
    unsigned             slot;
    int64_t              size;
    unsigned             n;
    int                  row[];
};

/* dq_net - the network of address text ip ("192.0.2.0/24"), or 0. */
static size_t
dq_net(const struct config *cfg, const char *ip, char *out)
{
    unsigned char b[16];
    unsigned      bits, i, all;
    int           fam = strchr(ip, ':') != NULL ? AF_INET6 : AF_INET;
    char          txt[INET6_ADDRSTRLEN];

    if (inet_pton(fam, ip, b) != 1)
        return 0;
    if (fam == AF_INET6 && IN6_IS_ADDR_V4MAPPED((struct in6_addr *)b)) {
        memmove(b, b + 12, 4);      /* an IPv4 client, as such */
        fam = AF_INET;
    }
    all = fam == AF_INET ? 32 : 128;
    bits = (unsigned)(fam == AF_INET ? cfg->quota_ipv4_prefix :
        cfg->quota_ipv6_prefix);
    for (i = bits; i < all; i++)
        b[i / 8] &= (unsigned char)~(0x80u >> (i % 8));
    if (inet_ntop(fam, b, txt, sizeof(txt)) == NULL)
        return 0;
    return (size_t)snprintf(out, STATUS_QUOTA_KEY_MAX + 1, "%s/%u", txt,
        bits);
}


size_t
deliver_quota_key(const struct config *cfg, unsigned kind, const char *v,
    char *out)
{
    const char *at;
    size_t      n, i;

    if (v == NULL || v[0] == '\0')
        return 0;
    if (kind == STATUS_QK_NET)
        return dq_net(cfg, v, out);
    if (kind == STATUS_QK_SENDER || kind == STATUS_QK_RCPT) {
        if ((at = strrchr(v, '@')) == NULL)
            return 0;               /* <>, <postmaster> */
        v = at + 1;
    }
    if ((n = strlen(v)) == 0 || n > STATUS_QUOTA_KEY_MAX)
        return 0;
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)v[i];

        if (kind != STATUS_QK_USER && c >= 'A' && c <= 'Z')
            c = (unsigned char)(c - 'A' + 'a');
        out[i] = (char)(c < ' ' || c == 0x7f ? '?' : c);
    }
    out[n] = '\0';
    return n;
}


void
deliver_set_quota(struct deliver *d, struct status_page *sp, unsigned slot)
{
    /* counted whenever the page is there, quotas or not: mtactl quota
     * set may turn one on later, and the counts must be right by then */
    d->qpage = sp;
    d->qslot = slot;
    status_quota_clear_slot(sp, slot);
}


/* dq_add_key - take the row of (kind, v) for the message, unless one of
 * r's rows already is it (a second recipient of a domain). */
static void
dq_add_key(struct dq_rows *r, unsigned kind, const char *v, uint32_t now_s)
{
    char     key[STATUS_QUOTA_KEY_MAX + 1];
    size_t   n;
    unsigned i;
    int      row;

    if (r->n >= DQ_MAX_KEYS ||
        (n = deliver_quota_key(r->cfg, kind, v, key)) == 0)
        return;
    for (i = 0; i < r->n; i++) {
        const struct status_quota_row *q = &r->sp->quota[r->row[i]];

        if (q->kind == kind && q->klen == n && memcmp(q->key, key, n) == 0)
            return;
    }
    row = status_quota_take(r->sp, kind, key, n, r->slot, 1, r->size, now_s);
    if (row >= 0)
        r->row[r->n++] = row;
}


struct dq_rows *
dq_take(struct deliver *d, const struct spool_env *env)
{
    struct dq_rows *r;
    uint32_t        now_s = (uint32_t)(util_now_ms() / 1000);
    size_t          i;

    if (d->qpage == NULL || d->draining)
        return NULL;
    r = xcalloc(1, sizeof(*r) + DQ_MAX_KEYS * sizeof(r->row[0]));
    r->sp = d->qpage;
    r->cfg = d->cfg;
    r->slot = d->qslot;
    r->size = (int64_t)env->body_size;
    dq_add_key(r, STATUS_QK_SENDER, env->sender, now_s);
    dq_add_key(r, STATUS_QK_USER, env->auth_user, now_s);
    dq_add_key(r, STATUS_QK_NET, env->client_ip, now_s);
    for (i = 0; i < env->nrcpt; i++)
        dq_add_key(r, STATUS_QK_RCPT, env->rcpt[i].addr, now_s);
    return r;
}


/* deliver_quota_limit - the limit in force: the row's override, the
 * kind's (mtactl quota set KIND *), else the configuration; 0 none. */
uint64_t
deliver_quota_limit(const struct config *cfg, struct status_page *sp,
    unsigned kind, uint64_t row_lim1, int bytes)
{
    uint64_t def1 = bytes ? sp->quota_def_bytes[kind] :
        sp->quota_def_msgs[kind];

    if (row_lim1 != 0)
        return row_lim1 - 1;
    if (def1 != 0)
        return def1 - 1;
    return bytes ? cfg->quota_bytes[kind] : (uint64_t)cfg->quota_msgs[kind];
}


/* deliver_quota_end - when row's key is under its quotas again and an
 * episode was on, its end is logged (once: whoever clears the flag). */
void
deliver_quota_end(const struct config *cfg, struct status_page *sp, int row)
{
    struct status_quota_row *q = &sp->quota[row];
    struct status_quota_use  u;
    uint64_t                 lm, lb;
    uint32_t                 on = 1;
    int                      first;

    if (__atomic_load_n(&q->over, __ATOMIC_RELAXED) == 0)
        return;
    status_quota_sum(sp, q->kind, q->key, q->klen, &u, &first);
    lm = deliver_quota_limit(cfg, sp, q->kind, u.lim_msgs, 0);
    lb = deliver_quota_limit(cfg, sp, q->kind, u.lim_bytes, 1);
    if ((lm != 0 && u.msgs >= (int64_t)lm) ||
        (lb != 0 && u.bytes >= (int64_t)lb))
        return;
    if (!__atomic_compare_exchange_n(&q->over, &on, 0, 0, __ATOMIC_ACQ_REL,
        __ATOMIC_RELAXED))
        return;
    log_ev(LOGL_NOTICE, "quota", LOG_KVS(LKV_S("kind",
        status_quota_kind_name(q->kind)), LKV_S("key", q->key),
        LKV_S("episode", "end")),
        "quota: %s %s is under its quotas again (%lld messages, %lld bytes "
        "queued): mail is accepted", status_quota_kind_name(q->kind),
        q->key, (long long)u.msgs, (long long)u.bytes);
}


void
dq_release(struct dq_rows *r)
{
    unsigned i;

    if (r == NULL)
        return;
    for (i = 0; i < r->n; i++) {
        status_quota_add(r->sp, r->row[i], r->slot, -1, -r->size);
        deliver_quota_end(r->cfg, r->sp, r->row[i]);
    }
    free(r);
}


void
dq_forget(struct dq_rows *r)
{
    free(r);
}
