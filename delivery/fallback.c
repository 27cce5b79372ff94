/*
 * fallback.c - the fallback relay: where the recipients go that the
 * direct hosts of their route deferred (Postfix's smtp_fallback_relay).
 *
 * PURPOSE   A route's hosts (or the MX hosts of an mx route) are the
 *           direct hosts; when none of them took a recipient in this
 *           attempt (unreachable, marked down, DNS failed, or a 4xx from
 *           the last one), the recipient goes on to the fallback relay
 *           in the same attempt: the route's own fallback=, else
 *           delivery.fallback_relay.  With delivery.fallback_after_attempts
 *           N, only from the message's N-th attempt on (the earlier ones
 *           defer as without a fallback).
 * CONTRACT  Only deferred recipients go: a 5xx from a direct host is
 *           final (it bounces), never a reason to try elsewhere.  The
 *           fallback transaction is one more relay transaction of the
 *           attempt (its destination the fallback's route text, so its
 *           connections are shared with every other message going
 *           there), under the same TLS level, and itself has no fallback.
 *           Its results are the recipients' (relay=... names the
 *           fallback host); the direct hosts' reason is logged once per
 *           transaction.  Not at the stop (drain, giveback): the
 *           recipients stay deferred for the next generation.
 * FAILURE   A fallback that cannot be parsed (only a routes.mdb entry
 *           written by something else than mtactl could) is logged and
 *           not used.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "config/config.h"
#include "router/route.h"
#include "delivery/delivery_int.h"
#include "delivery/resolve.h"

/* dl_fallback_text - t's fallback relay, or NULL: the route's own,
 * "none" for none, else delivery.fallback_relay. */
static const char *
dl_fallback_text(const struct deliver *d, const struct dl_txn *t)
{
    if (t->route.fallback[0] != '\0')
        return strcasecmp(t->route.fallback, "none") == 0 ? NULL :
            t->route.fallback;
    return d->cfg->fallback_relay;
}


struct dl_txn *
dl_fallback(struct dl_attempt *a, struct dl_txn *t)
{
    struct deliver *d = a->d;
    const char     *fb;
    struct dl_txn  *n;
    size_t          i, k = 0, first = SIZE_MAX;
    char            why[256];
    unsigned        nth = a->env->attempts + 1;   /* this attempt */

    if (t->fallback || d->draining || d->gaveback ||
        (fb = dl_fallback_text(d, t)) == NULL ||
        nth < (unsigned)d->cfg->fallback_after_attempts)
        return NULL;
    for (i = 0; i < t->rt.nrcpt; i++)
        if (t->rt.res[i].status == MTA_DEFER) {
            k++;
            if (first == SIZE_MAX)
                first = i;
        }
    if (k == 0)
        return NULL;
    n = xcalloc(1, sizeof(*n));
    if (route_parse(fb, &n->route, why, sizeof(why)) < 0 ||
        n->route.kind != ROUTE_SMTP) {
        log_warn("%s: fallback relay %.200s not used: %s", a->env->id, fb,
            why);
        free(n);
        return NULL;
    }
    n->a = a;
    n->fallback = 1;
    util_strlcpy(n->text, fb, sizeof(n->text));
    n->rt.tls = t->rt.tls;          /* level and policy domain, as t */
    n->rt.rcpt = xcalloc(k, sizeof(size_t));
    n->cap = k;
    for (i = 0; i < t->rt.nrcpt; i++)
        if (t->rt.res[i].status == MTA_DEFER)
            n->rt.rcpt[n->rt.nrcpt++] = t->rt.rcpt[i];
    log_info("%s: %zu recipient%s deferred by %s (%s); trying the fallback "
        "relay %s", a->env->id, k, k == 1 ? "" : "s", t->text,
        t->rt.res[first].reply, fb);
    n->next = a->txns;
    a->txns = n;
    return n;
}


void
dl_fallback_start(struct dl_attempt *a, struct dl_txn *fb, mta_done_fn *done)
{
    struct deliver *d = a->d;

    a->open++;
    fb->rt.env = a->env;
    fb->rt.fd = a->fd;
    fb->rt.body_off = a->body_off;
    fb->rt.dest = fb->text;
    fb->rt.route = &fb->route;
    fb->rt.res = xcalloc(fb->rt.nrcpt, sizeof(*fb->rt.res));
    fb->rt.done = done;
    fb->rt.arg = fb;
    resolve_submit(d->resolve, d->relay, &fb->rt, NULL);
}
