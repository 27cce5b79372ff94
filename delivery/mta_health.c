/*
 * mta_health.c - next-hop health for the outbound client: a hop that
 * does not answer is skipped by every worker for a while.
 *
 * PURPOSE   Without it every message to a destination whose first host is
 *           dead waits out that host's connect (or greeting) timeout
 *           before the next host is tried.  With it the first connection
 *           that finds the hop dead marks it down in the node's table
 *           (common/status_health.c, on the shared status page); the
 *           other connections, in every worker, skip it at once, and the
 *           fail-over (mta.c) goes on with the next hop, the fallback
 *           relay (deliver.c) or a deferral.  After the down time one
 *           connection (in the whole node) probes the hop; a greeting
 *           brings it back, a failure marks it down again for twice as
 *           long, up to delivery.host_down_max.
 * CONTRACT  "Does not answer" is a refused or timed-out connect, or no
 *           greeting (timeout or the connection closed before it).  A
 *           hop that answers, even 4xx or 5xx, is up: what it says is
 *           the transaction's business, not health's.  A down hop is
 *           skipped, never bounced for: a transaction whose every hop is
 *           down defers.  The log has one line when a hop goes down, one
 *           per failed probe, one when it is up again.
 * FAILURE   Health off (no status page, host_down_for 0): nothing is
 *           skipped.  A full table records nothing (the hop is tried).
 */
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "common/status.h"
#include "common/util.h"
#include "delivery/mta.h"

/* mta_health_now - the table's clock: CLOCK_MONOTONIC seconds, the same
 * in every process of the node. */
static uint32_t
mta_health_now(void)
{
    return (uint32_t)(util_now_ms() / 1000);
}


void
mta_set_health(struct mta *r, struct status_page *sp, uint64_t down_ms,
    uint64_t max_ms)
{
    uint64_t probe_ms;

    r->health = down_ms > 0 ? sp : NULL;
    r->down_s = (uint32_t)((down_ms + 999) / 1000);
    r->down_max_s = (uint32_t)((max_ms + 999) / 1000);
    if (r->down_max_s < r->down_s)
        r->down_max_s = r->down_s;
    /* a probe holds its claim as long as it may take to fail; after that
     * (its worker died) another connection probes */
    probe_ms = r->connect_timeout_ms + r->t.greeting_ms + 1000;
    r->probe_s = (uint32_t)((probe_ms + 999) / 1000);
}


static const struct sockaddr *
mta_health_sa(const struct mta_hop *a)
{
    return (const struct sockaddr *)&a->ss;
}


int
mta_health_skip(struct mta_conn *c, const struct mta_hop *a)
{
    struct mta *r = c->r;
    char        ip[INET6_ADDRSTRLEN + 8], err[STATUS_HOP_ERR] = "";
    int         st;

    c->probe = 0;
    if (r->health == NULL)
        return 0;
    st = status_hop_check(r->health, mta_health_sa(a), mta_health_now(),
        r->probe_s, r->down_max_s, err, sizeof(err));
    if (st == STATUS_HOP_UP)
        return 0;
    util_sockaddr_ip((const struct sockaddr *)&a->ss, ip, sizeof(ip));
    if (st == STATUS_HOP_PROBE) {
        c->probe = 1;
        log_info("next hop %s[%s]:%u: probing after its down time",
            a->name, ip, a->port);
        return 0;
    }
    /* the reason carries what the hop did, for the log and a DSN */
    snprintf(c->lasterr, sizeof(c->lasterr), "next hop %s[%s]:%u is marked "
        "down (%s)", a->name, ip, a->port, err[0] ? err : "it did not "
        "answer");
    c->perm = 0;                    /* skipped: never a bounce */
    return 1;
}


void
mta_health_failed(struct mta_conn *c, const char *why)
{
    struct mta *r = c->r;
    const struct mta_hop *a;
    char        err[STATUS_HOP_ERR];
    unsigned    n;
    int         probe = c->probe;

    c->probe = 0;
    if (r->health == NULL || c->cur == 0 || c->greeted)
        return;                     /* a 4xx or 5xx greeting: it answers */
    a = &c->addr[c->cur - 1];
    (void)util_escape(err, sizeof(err), why, strlen(why), 0, NULL);
    n = status_hop_down(r->health, mta_health_sa(a), mta_health_now(),
        r->down_s, r->down_max_s, err);
    if (n == 1 && !probe)
        log_warn("next hop %s marked down for %us: %s", c->name, r->down_s,
            err);
    else if (probe && n > 0)
        log_warn("next hop %s still down after its probe (failure %u): %s",
            c->name, n, err);
}


void
mta_health_answered(struct mta_conn *c)
{
    struct mta *r = c->r;

    c->probe = 0;
    c->greeted = 1;
    if (r->health == NULL || c->cur == 0)
        return;
    if (status_hop_up(r->health, mta_health_sa(&c->addr[c->cur - 1])))
        log_info("next hop %s is up again", c->name);
}
