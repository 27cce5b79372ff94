/*
 * session_events.c - the reception event of each committed message
 * (events/events.h), on the spool before its 250 goes out: the group
 * commit (spool.fsync) emits a round's events and flushes them once
 * before the round's replies (sess_commit_done); a message committed
 * inline flushes its own (sess_queued), one write() each.
 */
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "common/util.h"
#include "config/config.h"
#include "spool/spool.h"
#include "events/events.h"
#include "smtpd/smtpd.h"
#include "smtpd/smtpd_int.h"

#define SESS_EV_HDRS_MAX (64 * 1024)    /* header bytes looked at */

/* sess_event_hdrs - the message's first bytes (its header section) for
 * events.headers: the copy in memory, else a pread of the kept file. */
static const char *
sess_event_hdrs(const struct sess_txn *t, uint64_t size, char *buf,
    size_t bufsz, size_t *len)
{
    const struct spool_env *k = t->kenv;
    ssize_t n;

    *len = 0;
    if (k == NULL)
        return NULL;                /* not kept: no fd at hand */
    if (k->body_copy != NULL) {
        /* body_size is set after this (sess_queued): size is the body's */
        *len = size < bufsz ? (size_t)size : bufsz;
        return k->body_copy;
    }
    n = pread(t->kfd, buf, bufsz, t->koff);
    if (n <= 0)
        return NULL;
    *len = (size_t)n;
    return buf;
}


void
sess_event_reception(struct smtpd *d, const struct sess *s,
    const struct sess_txn *t, uint64_t size)
{
    static char        hbuf[SESS_EV_HDRS_MAX];
    struct events_rec  r;

    if (!events_wants(d->events, EVENTS_RECEPTION))
        return;
    memset(&r, 0, sizeof(r));
    r.type = EVENTS_RECEPTION;
    r.queue_id = t->id;
    r.sender = t->env.sender;
    r.size = size;
    r.nrcpt = t->env.nrcpt;
    r.rcpt = t->env.rcpt;
    if (s != NULL) {                /* a client that left: no session */
        r.client_ip = s->ip;
        r.client_port = s->port;
        r.helo = s->helo;
        r.auth_user = smtpd_auth_user(s->auth);
    }
    if (events_want_headers(d->events))
        r.hdr = sess_event_hdrs(t, size, hbuf, sizeof(hbuf), &r.hdrlen);
    events_emit(d->events, &r);
}
