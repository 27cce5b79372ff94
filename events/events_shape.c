/*
 * events_shape.c - shaping episodes the master began or ended (mtactl
 * suspend/resume, the end of a back-off at the master's tick) reach the
 * events through a worker: the master writes no spool file, so it sends
 * one CHAN_SHAPE_EVENT line (common/chan.h) that events_shape_take()
 * turns into the event.  Episodes a worker begins are emitted where they
 * begin (delivery/dl_events.c).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "events/events.h"

#define EVS_NAME_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ" \
    "0123456789.-_:[]*"
#define EVS_FIELDS 6


size_t
events_shape_encode(char *out, size_t outsz, enum events_type t,
    const char *site, const char *source, const char *mode,
    uint64_t until_ms, const char *reason)
{
    int n = snprintf(out, outsz, "%s\t%s\t%s\t%s\t%" PRIu64 "\t%s",
        t == EVENTS_SUSPENSION ? "suspension" : "resumption", site, source,
        mode != NULL ? mode : "-", until_ms, reason != NULL ? reason : "");

    return n < 0 || (size_t)n >= outsz ? 0 : (size_t)n;
}


/* evs_name_ok - a site or source as the master's names are made */
static int
evs_name_ok(const char *s)
{
    return s[0] != '\0' && strlen(s) < 64 &&
        strspn(s, EVS_NAME_CHARS) == strlen(s);
}


/* evs_text_ok - printable ASCII: the master's own words */
static int
evs_text_ok(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
            return 0;
    return 1;
}


int
events_shape_take(struct events *e, const char *payload, size_t len)
{
    char    buf[1025], *f[EVS_FIELDS], *p, *end;
    size_t  n = 0;
    uint64_t until;
    enum events_type t;

    if (len >= sizeof(buf) || memchr(payload, '\0', len) != NULL)
        return -1;
    memcpy(buf, payload, len);
    buf[len] = '\0';
    for (p = buf; n < EVS_FIELDS; n++) {
        f[n] = p;
        if (n + 1 < EVS_FIELDS) {
            if ((p = strchr(p, '\t')) == NULL)
                return -1;
            *p++ = '\0';
        }
    }
    if (strcmp(f[0], "suspension") == 0)
        t = EVENTS_SUSPENSION;
    else if (strcmp(f[0], "resumption") == 0)
        t = EVENTS_RESUMPTION;
    else
        return -1;
    until = strtoull(f[4], &end, 10);
    if (!evs_name_ok(f[1]) || !evs_name_ok(f[2]) || *end != '\0' ||
        f[4][0] == '\0' || (strcmp(f[3], "suspend") != 0 &&
        strcmp(f[3], "slow") != 0 && strcmp(f[3], "-") != 0) ||
        !evs_text_ok(f[5]))
        return -1;
    events_emit_shape(e, t, f[1], f[2], strcmp(f[3], "-") ? f[3] : NULL,
        until, f[5][0] != '\0' ? f[5] : NULL);
    return 0;
}
