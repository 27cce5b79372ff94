/*
 * status_json.c - `mtactl status --json`: the status report as one JSON
 *                 object, for scripts.
 *
 * PURPOSE   The same facts as the text report (control.c), with stable
 *           keys: version, pid, uptime_s, generation, workers_configured, load,
 *           throttle {queue_only, refuse}, logd {pid, state}, reload,
 *           workers [{slot, pid, generation, shard, state, uptime_s,
 *           sessions, connections_total, messages_in, recipients_sent,
 *           deferred, bounced, bytes_in, errors, log_dropped}], totals
 *           {...the same counters...}, rate {messages_in_per_s,
 *           recipients_sent_per_s, window_s}, queue (files, or null),
 *           log_dropped.
 * CONTRACT  Answered by the master for the request "status json"; the
 *           reply is "ok\n" and the object on one line.
 * FAILURE   None (a queue that cannot be counted is null).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/log.h"
#include "common/status.h"
#include "common/util.h"
#include "config/config.h"
#include "master/master_int.h"
#include "master/ops.h"

static const char *
sj_state(const struct slot *s)
{
    switch (s->state) {
    case SLOT_RUNNING:
        return s->ready || s->role == ROLE_LOGD || s->role == ROLE_API ?
            "running" : "starting";
    case SLOT_STOPPING: return "stopping";
    case SLOT_BACKOFF:  return "restart-wait";
    default:            return "free";
    }
}

static void
sj_counters(struct buf *t, const struct status_worker *w)
{
#define LD(f) __atomic_load_n(&w->f, __ATOMIC_RELAXED)
    buf_printf(t, "\"sessions\":%" PRIu64 ",\"connections_total\":%" PRIu64
        ",\"messages_in\":%" PRIu64 ",\"recipients_sent\":%" PRIu64
        ",\"deferred\":%" PRIu64 ",\"bounced\":%" PRIu64 ",\"bytes_in\":%"
        PRIu64 ",\"errors\":%" PRIu64 ",\"log_dropped\":%" PRIu64,
        LD(conns_cur), LD(conns_total), LD(msgs_in), LD(msgs_out),
        LD(msgs_deferred), LD(msgs_bounced), LD(bytes_in), LD(errors),
        LD(log_dropped));
#undef LD
}

void
status_json_report(struct master *m, char **out)
{
    struct buf           t;
    struct status_worker tot;
    struct status_page  *st = m->status;
    uint64_t             now = util_now_ms(), wall = util_wall_ms();
    double               in_ps, out_ps;
    long                 q = metrics_queue_size(m, m->cur->cfg->spool_dir);
    unsigned             load = __atomic_load_n(&st->load_x100,
                             __ATOMIC_RELAXED);
    unsigned             thr = __atomic_load_n(&st->throttle,
                             __ATOMIC_RELAXED);
    int                  first = 1;

    buf_init(&t);
    master_totals(m, &tot);
    master_rates(m, &in_ps, &out_ps);
    buf_printf(&t, "ok\n{\"version\":\"%s\",\"pid\":%d,\"uptime_s\":%" PRIu64 ",\"generation\":%u,"
        "\"workers_configured\":%d,\"load\":%u.%02u,\"throttle\":{"
        "\"queue_only\":%s,\"refuse\":%s},\"logd\":{\"pid\":%d,\"state\":"
        "\"%s\"},\"api\":{\"pid\":%d,\"state\":\"%s\"},\"reload\":\"%s\","
        "\"workers\":[", MTAD_VERSION,
        (int)getpid(),
        (now - m->started_ms) / 1000, m->cur->id, m->cur->cfg->workers,
        load / 100, load % 100, (thr & STATUS_THROTTLE_HOLD) ? "true" :
        "false", (thr & STATUS_THROTTLE_REFUSE) ? "true" : "false",
        (int)m->logd.pid, sj_state(&m->logd),
        (int)m->api.cur.pid, m->api.lfd < 0 ? "off" : sj_state(&m->api.cur),
        m->next != NULL ? "in progress" : "idle");
    for (size_t i = 0; i < MASTER_MAX_SLOTS; i++) {
        const struct slot          *s = &m->slots[i];
        const struct status_worker *w = &st->w[i];
        uint64_t started = __atomic_load_n(&w->started_ms, __ATOMIC_RELAXED);

        if (s->role != ROLE_WORKER)
            continue;
        buf_printf(&t, "%s{\"slot\":%zu,\"pid\":%d,\"generation\":%u,"
            "\"shard\":%u,\"state\":\"%s\",\"uptime_s\":%" PRIu64 ",",
            first ? "" : ",", i, (int)s->pid, s->generation, s->shard,
            sj_state(s), s->pid > 0 && wall > started ?
            (wall - started) / 1000 : 0);
        sj_counters(&t, w);
        buf_printf(&t, "}");
        first = 0;
    }
    buf_printf(&t, "],\"totals\":{");
    sj_counters(&t, &tot);
    buf_printf(&t, "},\"rate\":{\"messages_in_per_s\":%.2f,"
        "\"recipients_sent_per_s\":%.2f,\"window_s\":%u},\"queue\":",
        in_ps, out_ps, MASTER_RATE_WINDOW);
    if (q >= 0)
        buf_printf(&t, "%ld", q);
    else
        buf_printf(&t, "null");
    buf_printf(&t, ",\"log_dropped\":%" PRIu64 "}\n", tot.log_dropped +
        log_dropped());
    *out = t.data;
}
