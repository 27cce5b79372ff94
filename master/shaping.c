/*
 * shaping.c - the master's side of traffic shaping (shape.h): the node's
 * shared table (made before the first fork, kept across reloads), the
 * episode steps and ends logged once a second, and the control requests
 * "shaping list|json", "shaping suspend NAME SOURCE|- SECONDS", "shaping
 * resume NAME SOURCE|-" (mtactl shaping, suspend, resume).
 *
 * CONTRACT  The workers start episodes (and log their start); the master's
 *           tick logs each ramp step and each end, so an episode has one
 *           line per change, never one per message.  NAME is a site, or a
 *           domain that a rule lists or that a worker saw for a site; an
 *           unknown name makes an entry of its own (a site by that name,
 *           as an unmatched destination of that domain would be called).
 * FAILURE   A bad request answers "error: ..." and changes nothing.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/log.h"
#include "common/status.h"
#include "common/util.h"
#include "config/config.h"
#include "common/chan.h"
#include "events/events.h"
#include "shape/shape.h"
#include "master/master_int.h"
#include "master/ops.h"

#define SHAPING_LIST_MAX SHAPE_SLOTS

_Static_assert(SHAPE_MAX_WORKERS >= STATUS_MAX_WORKERS,
    "a shaping entry has a share for every worker slot");
#define SHAPING_SOURCE   "default"
#define SHAPING_NAME_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ" \
    "0123456789.-_:[]"

static const char *
shaping_mode(const struct shape_view *v)
{
    return v->mode == SHAPE_M_SUSPEND ? "suspended" :
        v->mode == SHAPE_M_SLOW ? "slow" : "normal";
}

/* shaping_tell - an episode the master began or ended, to the events:
 * one worker of the current generation emits it (events_shape.c). */
static void
shaping_tell(struct master *m, enum events_type t, const char *site,
    const char *source, const char *mode, uint64_t until_ms,
    const char *reason)
{
    const struct config *cfg = m->cur != NULL ? m->cur->cfg : NULL;
    char                 line[512];
    size_t               n;

    if (cfg == NULL || (cfg->events_types & (1u << t)) == 0 ||
        (cfg->events_http_url == NULL && cfg->events_redis_address == NULL) ||
        (n = events_shape_encode(line, sizeof(line), t, site, source, mode,
        until_ms, reason)) == 0)
        return;
    for (size_t i = 0; i < MASTER_MAX_SLOTS; i++) {
        struct slot *s = &m->slots[i];

        if (s->role == ROLE_WORKER && s->state == SLOT_RUNNING &&
            s->generation == m->cur->id && s->chan >= 0 &&
            chan_send(s->chan, CHAN_SHAPE_EVENT, line, n, -1) == 0)
            return;
    }
    log_warn("shaping: no worker took the %s event of site %s source %s",
        events_type_name(t), site, source);
}


static void
shaping_event(void *arg, const struct shape_view *v, const char *what)
{
    if (strcmp(what, "end") == 0) {
        log_notice("shaping: site %s source %s back to normal", v->site,
            v->source);
        shaping_tell(arg, EVENTS_RESUMPTION, v->site, v->source, NULL, 0,
            "back-off ended");
    } else
        log_notice("shaping: site %s source %s ramp step %u of %u: rate at "
            "%u.%u%%", v->site, v->source, v->step, v->steps,
            v->factor / 10, v->factor % 10);
}

/* The observed rate: each entry's sent counter once a tick, the last
 * SHAPING_RING ticks (the master's own memory, made at the first tick
 * that finds a site). */
#define SHAPING_RING 61
static struct {
    uint64_t  ms[SHAPING_RING];
    uint64_t (*sent)[SHAPE_SLOTS];
    unsigned  head, n;
} shaping_ring;

void
master_shaping_tick(struct master *m, uint64_t now)
{
    size_t e;

    if (m->shape_tab == NULL)
        return;
    shape_tick(m->shape_tab, util_wall_ms(), shaping_event, m);
    if (shaping_ring.sent == NULL) {
        struct shape_view one;

        if (shape_table_list(m->shape_tab, 0, &one, 1) == 0)
            return;                     /* no site yet: nothing to keep */
        shaping_ring.sent = xcalloc(SHAPING_RING, sizeof(*shaping_ring.sent));
    }
    shaping_ring.head = (shaping_ring.head + 1) % SHAPING_RING;
    shaping_ring.ms[shaping_ring.head] = now;
    for (e = 0; e < SHAPE_SLOTS; e++)
        shaping_ring.sent[shaping_ring.head][e] = shape_sent(m->shape_tab,
            (int)e);
    if (shaping_ring.n < SHAPING_RING)
        shaping_ring.n++;
}

/* Transactions a minute to entry e over the ring (up to a minute). */
static double
shaping_observed(int e)
{
    unsigned old;
    uint64_t dt;

    if (shaping_ring.sent == NULL || shaping_ring.n < 2 || e < 0 ||
        e >= SHAPE_SLOTS)
        return 0;
    old = (shaping_ring.head + SHAPING_RING - (shaping_ring.n - 1)) %
        SHAPING_RING;
    dt = shaping_ring.ms[shaping_ring.head] - shaping_ring.ms[old];
    if (dt == 0)
        return 0;
    return (double)(shaping_ring.sent[shaping_ring.head][e] -
        shaping_ring.sent[old][e]) * 60000.0 / (double)dt;
}

/* a rate as "600/m", scaled by factor; "-" none */
static void
shaping_rate(struct buf *t, const struct shape_rate *r, uint32_t factor,
    int json)
{
    double v;

    if (r->n == 0 || r->per_ms == 0) {
        buf_printf(t, json ? "null" : "-");
        return;
    }
    v = (double)r->n * factor / 1000.0;
    if (json)
        buf_printf(t, "{\"n\":%.3g,\"per_ms\":%" PRIu64 "}", v, r->per_ms);
    else
        buf_printf(t, "%.3g/%" PRIu64 "s", v, r->per_ms / 1000);
}

/* JSON string: v is escaped already (util_escape: printable, UTF-8);
 * quotes and backslashes are escaped here */
static void
shaping_jstr(struct buf *t, const char *s)
{
    buf_append(t, "\"", 1);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            buf_append(t, "\\", 1);
        buf_append(t, s, 1);
    }
    buf_append(t, "\"", 1);
}

static void
shaping_json(struct buf *t, const struct shape_view *v, size_t n,
    uint64_t now)
{
    size_t i;
    int    r;
    static const char *const rn[] = { "per_second", "per_minute",
        "per_hour", "new_connections" };

    buf_printf(t, "ok\n{\"pairs\":[");
    for (i = 0; i < n; i++) {
        buf_printf(t, "%s{\"site\":", i ? "," : "");
        shaping_jstr(t, v[i].site);
        buf_printf(t, ",\"source\":");
        shaping_jstr(t, v[i].source);
        buf_printf(t, ",\"domain\":");
        shaping_jstr(t, v[i].domain);
        buf_printf(t, ",\"state\":\"%s\",\"manual\":%s,\"factor\":%.3f,"
            "\"step\":%u,\"steps\":%u,\"connections\":%u,"
            "\"max_connections\":%u,\"messages_per_connection\":%u,"
            "\"recipients_per_message\":%u,\"burst\":%u",
            shaping_mode(&v[i]), v[i].manual ? "true" : "false",
            v[i].factor / 1000.0, v[i].step, v[i].steps, v[i].conns,
            v[i].lim.connections, v[i].lim.messages_per_connection,
            v[i].lim.recipients_per_message, v[i].lim.burst);
        for (r = 0; r < SHAPE_NRATES; r++) {
            buf_printf(t, ",\"%s\":", rn[r]);
            shaping_rate(t, &v[i].lim.rate[r], r == SHAPE_R_CONN ? 1000 :
                v[i].factor, 1);
        }
        buf_printf(t, ",\"since_ms\":%" PRIu64 ",\"until_ms\":%" PRIu64
            ",\"left_s\":%" PRIu64 ",\"reply\":", v[i].since_ms,
            v[i].until_ms, v[i].until_ms > now ?
            (v[i].until_ms - now + 999) / 1000 : 0);
        shaping_jstr(t, v[i].mode != SHAPE_M_NONE ? v[i].reply : "");
        buf_printf(t, ",\"sent\":%" PRIu64 ",\"held\":%" PRIu64
            ",\"backoffs\":%" PRIu64 ",\"observed_per_minute\":%.1f}",
            v[i].sent, v[i].held, v[i].backoffs, shaping_observed(v[i].e));
    }
    buf_printf(t, "]}\n");
}

static void
shaping_text(struct buf *t, const struct shape_view *v, size_t n,
    uint64_t now)
{
    size_t i;
    int    r;

    buf_printf(t, "ok\n");
    if (n == 0)
        buf_printf(t, "no site has been shaped yet\n");
    for (i = 0; i < n; i++) {
        buf_printf(t, "%s source=%s state=%s", v[i].site, v[i].source,
            shaping_mode(&v[i]));
        if (v[i].mode == SHAPE_M_SLOW)
            buf_printf(t, " factor=%u.%u%% step=%u/%u", v[i].factor / 10,
                v[i].factor % 10, v[i].step, v[i].steps);
        if (v[i].mode != SHAPE_M_NONE)
            buf_printf(t, " until=+%" PRIu64 "s%s", v[i].until_ms > now ?
                (v[i].until_ms - now + 999) / 1000 : 0,
                v[i].manual ? " manual" : "");
        buf_printf(t, "\n  connections=%u/", v[i].conns);
        if (v[i].lim.connections)
            buf_printf(t, "%u", v[i].lim.connections);
        else
            buf_printf(t, "-");
        buf_printf(t, " msgs/conn=%u rcpts/msg=%u burst=%u rate=",
            v[i].lim.messages_per_connection,
            v[i].lim.recipients_per_message, v[i].lim.burst);
        for (r = SHAPE_R_SEC; r <= SHAPE_R_HOUR; r++) {
            if (r > SHAPE_R_SEC)
                buf_printf(t, ",");
            shaping_rate(t, &v[i].lim.rate[r], v[i].factor, 0);
        }
        buf_printf(t, " new_conns=");
        shaping_rate(t, &v[i].lim.rate[SHAPE_R_CONN], 1000, 0);
        buf_printf(t, "\n  now=%.1f/min sent=%" PRIu64 " held=%" PRIu64
            " backoffs=%" PRIu64 " domain=%s\n", shaping_observed(v[i].e),
            v[i].sent, v[i].held, v[i].backoffs,
            v[i].domain[0] ? v[i].domain : "-");
        if (v[i].mode != SHAPE_M_NONE && v[i].reply[0] != '\0')
            buf_printf(t, "  reply: %s\n", v[i].reply);
    }
}

struct shaping_op {
    struct master      *m;
    int                 resume;
    struct shape_action a;
    size_t              changed;
};

/* shaping_told - the event of entry e's change (its names from the view) */
static void
shaping_told(struct shaping_op *op, struct shape_table *t, int e,
    uint64_t now)
{
    static struct shape_view v[SHAPING_LIST_MAX];
    size_t n = shape_table_list(t, now, v, SHAPING_LIST_MAX);

    for (size_t i = 0; i < n; i++)
        if (v[i].e == e) {
            shaping_tell(op->m, op->resume ? EVENTS_RESUMPTION :
                EVENTS_SUSPENSION, v[i].site, v[i].source,
                op->resume ? NULL : "suspend",
                op->resume ? 0 : now + op->a.for_ms,
                op->resume ? "resumed with mtactl" : "suspended with mtactl");
            return;
        }
}

static void
shaping_apply(struct shape_table *t, int e, void *arg)
{
    struct shaping_op *op = arg;
    uint64_t           now = util_wall_ms();
    int                done;

    if (op->resume)
        done = shape_resume(t, e);
    else
        done = shape_backoff(t, e, &op->a, "suspended with mtactl", now, 1);
    op->changed += (size_t)done;
    if (done)
        shaping_told(op, t, e, now);
}

/* "suspend NAME SOURCE|- SECONDS", "resume NAME SOURCE|-" */
static void
shaping_change(struct master *m, int resume, const char *arg, struct buf *t)
{
    char               name[SHAPE_NAME_MAX], src[SHAPE_NAME_MAX];
    char               seen[SHAPE_NAME_MAX];
    unsigned long long secs = 0;
    const char        *site;
    struct shaping_op  op;
    size_t             n;

    if ((resume ? sscanf(arg, "%63s %63s", name, src) != 2 :
        sscanf(arg, "%63s %63s %llu", name, src, &secs) != 3) ||
        strspn(name, SHAPING_NAME_CHARS) != strlen(name) ||
        strspn(src, SHAPING_NAME_CHARS) != strlen(src) ||
        secs > 365ULL * 86400) {
        buf_printf(t, "error: shaping: expected suspend NAME SOURCE|- "
            "SECONDS or resume NAME SOURCE|-\n");
        return;
    }
    memset(&op, 0, sizeof(op));
    op.m = m;
    op.resume = resume;
    op.a.act = SHAPE_ACT_SUSPEND;
    op.a.for_ms = secs * 1000;
    site = name;
    if (shape_table_each(m->shape_tab, site, strcmp(src, "-") ? src : NULL,
        shaping_apply, &op) == 0 && m->cur != NULL &&
        m->cur->shape != NULL &&
        shape_site_of_domain(m->cur->shape, name) != NULL) {
        site = shape_site_of_domain(m->cur->shape, name);
        (void)shape_table_each(m->shape_tab, site, strcmp(src, "-") ? src :
            NULL, shaping_apply, &op);
    }
    if (op.changed == 0 && shape_site_seen(m->shape_tab, name, seen) != NULL &&
        strcmp(seen, site) != 0) {
        /* a domain a worker saw: its site */
        site = seen;
        (void)shape_table_each(m->shape_tab, site, strcmp(src, "-") ? src :
            NULL, shaping_apply, &op);
    }
    n = op.changed;
    if (n == 0 && !resume) {
        /* a site no worker has met yet: an entry of its own */
        int e = shape_entry(m->shape_tab, site, strcmp(src, "-") ? src :
            SHAPING_SOURCE);

        if (e < 0) {
            buf_printf(t, "error: shaping: the table of sites is full\n");
            return;
        }
        shaping_apply(m->shape_tab, e, &op);
        n = op.changed;
    }
    if (resume)
        buf_printf(t, n > 0 ? "ok\n%s: resumed\n" :
            "error: %s: not suspended or slowed\n", site);
    else
        buf_printf(t, "ok\n%s: suspended for %llus\n", site, secs);
    if (n > 0 && resume)
        log_notice("shaping: site %s source %s resumed with mtactl", site,
            strcmp(src, "-") ? src : "*");
    else if (n > 0)
        log_notice("shaping: site %s source %s suspended with mtactl for "
            "%llus", site, strcmp(src, "-") ? src : "*", secs);
}

void
ctl_shaping(struct master *m, const char *arg, char **out)
{
    struct buf t;
    uint64_t   now = util_wall_ms();

    buf_init(&t);
    if (m->shape_tab == NULL) {
        buf_printf(&t, "error: shaping: no shared table\n");
    } else if (strcmp(arg, "list") == 0 || strcmp(arg, "json") == 0) {
        struct shape_view *v = xcalloc(SHAPING_LIST_MAX, sizeof(*v));
        size_t             n = shape_table_list(m->shape_tab, now, v,
            SHAPING_LIST_MAX);

        if (arg[0] == 'j')
            shaping_json(&t, v, n, now);
        else
            shaping_text(&t, v, n, now);
        free(v);
    } else if (strncmp(arg, "suspend ", 8) == 0) {
        shaping_change(m, 0, arg + 8, &t);
    } else if (strncmp(arg, "resume ", 7) == 0) {
        shaping_change(m, 1, arg + 7, &t);
    } else {
        buf_printf(&t, "error: shaping: expected list, json, suspend or "
            "resume\n");
    }
    *out = t.data;
}

/* /metrics (metrics.c): per site x source. */
void
master_shaping_metrics(struct master *m, struct buf *b)
{
    struct shape_view *v;
    size_t             n, i;
    uint64_t           now = util_wall_ms();

    if (m->shape_tab == NULL)
        return;
    v = xcalloc(SHAPING_LIST_MAX, sizeof(*v));
    n = shape_table_list(m->shape_tab, now, v, SHAPING_LIST_MAX);
    if (n > 0) {
        buf_printf(b, "# HELP mtad_shaping_connections Outbound connections "
            "open per site and source, node-wide.\n"
            "# TYPE mtad_shaping_connections gauge\n");
        for (i = 0; i < n; i++)
            buf_printf(b, "mtad_shaping_connections{site=\"%s\",source=\"%s\"}"
                " %u\n", v[i].site, v[i].source, v[i].conns);
        buf_printf(b, "# HELP mtad_shaping_state 0 normal, 1 suspended, 2 "
            "slowed.\n# TYPE mtad_shaping_state gauge\n");
        for (i = 0; i < n; i++)
            buf_printf(b, "mtad_shaping_state{site=\"%s\",source=\"%s\"} "
                "%d\n", v[i].site, v[i].source, (int)v[i].mode);
        buf_printf(b, "# HELP mtad_shaping_rate_factor The share of the "
            "rate in force.\n# TYPE mtad_shaping_rate_factor gauge\n");
        for (i = 0; i < n; i++)
            buf_printf(b, "mtad_shaping_rate_factor{site=\"%s\",source="
                "\"%s\"} %.3f\n", v[i].site, v[i].source,
                v[i].factor / 1000.0);
        buf_printf(b, "# HELP mtad_shaping_sent_total Transactions "
            "delivered per site and source.\n"
            "# TYPE mtad_shaping_sent_total counter\n");
        for (i = 0; i < n; i++)
            buf_printf(b, "mtad_shaping_sent_total{site=\"%s\",source=\"%s\"}"
                " %" PRIu64 "\n", v[i].site, v[i].source, v[i].sent);
        buf_printf(b, "# HELP mtad_shaping_held_total Messages held back by "
            "shaping (they wait; not retries).\n"
            "# TYPE mtad_shaping_held_total counter\n");
        for (i = 0; i < n; i++)
            buf_printf(b, "mtad_shaping_held_total{site=\"%s\",source=\"%s\"}"
                " %" PRIu64 "\n", v[i].site, v[i].source, v[i].held);
        buf_printf(b, "# HELP mtad_shaping_backoffs_total Back-off episodes "
            "started or changed.\n"
            "# TYPE mtad_shaping_backoffs_total counter\n");
        for (i = 0; i < n; i++)
            buf_printf(b, "mtad_shaping_backoffs_total{site=\"%s\",source="
                "\"%s\"} %" PRIu64 "\n", v[i].site, v[i].source,
                v[i].backoffs);
    }
    free(v);
}
