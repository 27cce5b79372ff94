/*
 * dl_events.c - the delivery side of the events (events/events.h): one
 * record per recipient result (delivery, deferral, bounce, expiry) and per
 * DSN queued.  dl_save() flushes them to the spool before the state that
 * makes them final is written, so a saved result always has its event.
 */
#include <string.h>
#include <stdlib.h>

#include "common/util.h"
#include "config/config.h"
#include "spool/spool.h"
#include "tlspol/tlspol.h"
#include "events/events.h"
#include "delivery/delivery.h"
#include "delivery/delivery_int.h"
#include "delivery/dsn.h"

void
deliver_set_events(struct deliver *d, struct events *e)
{
    d->events = e;
}


/* dl_event_hdrs - the original's header section, read once per attempt
 * (only when events.headers names fields). */
static void
dl_event_hdrs(struct dl_attempt *a, struct events_rec *r)
{
    if (!events_want_headers(a->d->events) || a->fd < 0)
        return;
    if (a->ev_hdr == NULL)
        a->ev_hdr = dl_read_headers(a, &a->ev_hdrlen);
    r->hdr = a->ev_hdr;
    r->hdrlen = a->ev_hdrlen;
}


void
dl_event_result(struct dl_attempt *a, size_t i, int status,
    const struct tls_outcome *tls, const char *source)
{
    const struct spool_env  *env = a->env;
    const struct spool_rcpt *rc = &env->rcpt[i];
    struct events_rec        r;

    r.type = a->expiring ? EVENTS_EXPIRY : status == MTA_SENT ?
        EVENTS_DELIVERY : status == MTA_BOUNCE ? EVENTS_BOUNCE :
        EVENTS_DEFERRAL;
    if (!events_wants(a->d->events, r.type))
        return;
    memset(&r, 0, sizeof(r));
    r.type = a->expiring ? EVENTS_EXPIRY : status == MTA_SENT ?
        EVENTS_DELIVERY : status == MTA_BOUNCE ? EVENTS_BOUNCE :
        EVENTS_DEFERRAL;
    r.queue_id = env->id;
    r.sender = env->sender;
    r.recipient = rc->addr;
    r.size = env->body_size;
    r.attempt = env->attempts + 1;  /* counted when the attempt ends */
    r.relay = rc->relay;
    r.reply = rc->last_reply;
    r.cls = rc->cls;                /* bounce class of a failure */
    r.site = a->site != NULL && a->site[0] != '\0' ? a->site : NULL;
    r.source = source;              /* egress source, when configured */
    if (tls != NULL && tls->used) {
        r.tls_version = tls->version;
        r.tls_cipher = tls->cipher;
        r.tls_verify = tls_auth_name(tls->auth);
    }
    dl_event_hdrs(a, &r);
    events_emit(a->d->events, &r);
}


/* dl_event_shape - a back-off episode began here (mta_set_shape_report). */
void
dl_event_shape(void *arg, const char *site, const char *source,
    const char *mode, uint64_t until_ms, const char *reply)
{
    struct deliver *d = arg;

    events_emit_shape(d->events, EVENTS_SUSPENSION, site, source, mode,
        until_ms, reply);
}


void
dl_event_dsn(struct dl_attempt *a, const char *dsn_id, const char *kind)
{
    struct events_rec r;

    if (!events_wants(a->d->events, EVENTS_DSN))
        return;
    memset(&r, 0, sizeof(r));
    r.type = EVENTS_DSN;
    r.queue_id = a->env->id;
    r.sender = a->env->sender;
    r.recipient = a->env->sender;   /* the DSN goes to the sender */
    r.dsn_id = dsn_id;
    r.dsn_kind = kind;
    dl_event_hdrs(a, &r);
    events_emit(a->d->events, &r);
}
