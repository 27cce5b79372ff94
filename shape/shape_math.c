/*
 * shape_math.c - the pure parts of shaping (shape.h): the GCRA, the slow
 * ramp, host-name globs and the kind of one of mtad's own reasons.
 *
 * PURPOSE   Everything here is a function of its arguments, so the unit
 *           tests pin it down without a clock or a table.
 * GCRA      The generic cell rate algorithm (ATM's; a token bucket in one
 *           number): an event at now is conforming when now >= TAT - tau
 *           (tau = burst intervals); it moves TAT to max(TAT, now) + T.
 *           One word of state per rate, so a compare-and-swap shares it
 *           between processes (shape_table.c).
 * RAMP      A slow episode: the factor for for_ms, then steps equal steps
 *           up to 1000 per mille, each step_ms long: f + (1000 - f) *
 *           k / (steps + 1) at step k; after the last one it is over.
 */
#include <ctype.h>
#include <string.h>

#include "shape/shape.h"

int
shape_gcra(uint64_t *tat, uint64_t now_us, uint64_t interval_us,
    uint32_t burst, uint64_t *not_before_us)
{
    uint64_t t = *tat > now_us ? *tat : now_us;
    uint64_t tau = interval_us * burst;

    if (interval_us == 0)
        return 0;
    if (t - now_us > tau) {
        *not_before_us = t - tau;
        return -1;
    }
    *tat = t + interval_us;
    return 0;
}


uint64_t
shape_interval_us(const struct shape_rate *r, uint32_t factor)
{
    uint64_t iv;

    if (r->n == 0 || r->per_ms == 0)
        return 0;
    iv = r->per_ms * 1000 / r->n;
    if (iv == 0)
        iv = 1;
    if (factor > 0 && factor < 1000)
        iv = iv * 1000 / factor;        /* a slower rate: longer spacing */
    return iv;
}


uint32_t
shape_ramp(const struct shape_action *a, uint64_t since_ms, uint64_t now_ms,
    uint32_t *step)
{
    uint64_t in = now_ms > since_ms ? now_ms - since_ms : 0;
    uint64_t k;
    uint32_t f = a->factor > 1000 ? 1000 : a->factor;

    if (in < a->for_ms) {
        *step = 0;
        return f;
    }
    if (a->steps == 0 || a->step_ms == 0) {
        *step = a->steps + 1;
        return 1000;
    }
    k = (in - a->for_ms) / a->step_ms + 1;
    if (k > a->steps) {
        *step = a->steps + 1;
        return 1000;
    }
    *step = (uint32_t)k;
    return (uint32_t)(f + (1000 - f) * k / (a->steps + 1));
}


int
shape_glob(const char *p, const char *s)
{
    const char *star = NULL, *back = NULL;

    while (*s != '\0') {
        if (*p == '*') {
            star = p++;
            back = s;
        } else if (*p == '?' || (*p != '\0' &&
            tolower((unsigned char)*p) == tolower((unsigned char)*s))) {
            p++;
            s++;
        } else if (star != NULL) {
            p = star + 1;
            s = ++back;
        } else {
            return 0;
        }
    }
    while (*p == '*')
        p++;
    return *p == '\0';
}


/* The reasons mta.c and resolve.c write for failures of their own; the
 * next hop's replies start with three digits and a space. */
enum shape_kind
shape_kind_of(const char *reply)
{
    if (reply == NULL)
        return SHAPE_K_REPLY;
    /* a hop next-hop health skips (delivery/mta_health.c) did not answer:
     * its reason carries the last error, "(connect to ...)" */
    if (strncmp(reply, "next hop ", 9) == 0 &&
        (reply = strstr(reply, " is marked down (")) != NULL)
        reply += 17;
    if (strncmp(reply, "connect to ", 11) == 0)
        return strstr(reply, "timed out") != NULL ? SHAPE_K_TIMEOUT :
            SHAPE_K_CONNECT;
    if (strstr(reply, "timed out") != NULL || strstr(reply, "timeout") ||
        strstr(reply, " 4.4.2 ") != NULL)
        return SHAPE_K_TIMEOUT;
    if (strstr(reply, " 4.4.3 ") != NULL || strstr(reply, "not resolved") ||
        strstr(reply, "no address") != NULL)
        return SHAPE_K_DNS;
    if (strstr(reply, "TLS") != NULL && (strstr(reply, " 4.7.") != NULL ||
        strstr(reply, "handshake") != NULL))
        return SHAPE_K_TLS;
    if (strncmp(reply, "lost connection", 15) == 0)
        return SHAPE_K_CONNECT;
    return SHAPE_K_REPLY;
}


const char *
shape_kind_name(enum shape_kind k)
{
    static const char *const n[] = { "reply", "connect", "tls", "dns",
        "timeout" };

    return (unsigned)k < sizeof(n) / sizeof(n[0]) ? n[k] : "reply";
}


const char *
shape_act_name(enum shape_act a)
{
    static const char *const n[] = { "none", "suspend", "slow", "bounce" };

    return (unsigned)a < sizeof(n) / sizeof(n[0]) ? n[a] : "none";
}
