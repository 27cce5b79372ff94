/*
 * status_ops.c - the operations counters of the status page (metrics).
 *
 * PURPOSE   The latency histogram a worker fills per delivered recipient,
 *           and the sum the master makes over the slots.
 * CONTRACT  status_latency_add() is the hot-path part: a short scan of 16
 *           bounds and three relaxed atomic adds on the worker's own slot.
 * FAILURE   None.
 */
#include <stddef.h>

#include "common/status.h"

static const uint64_t status_lat_bounds[] = STATUS_LAT_BOUNDS_MS;

void
status_latency_add(struct status_ops *o, uint64_t ms)
{
    size_t i;

    for (i = 0; i < STATUS_LAT_NB - 1; i++)
        if (ms <= status_lat_bounds[i])
            break;
    STATUS_ADD(o->lat_bucket[i], 1);
    STATUS_ADD(o->lat_sum_ms, ms);
    STATUS_ADD(o->lat_count, 1);
}

void
status_ops_add(struct status_ops *t, const struct status_ops *w)
{
#define ADD(f) t->f += __atomic_load_n(&w->f, __ATOMIC_RELAXED)
    for (size_t i = 0; i < STATUS_REJ_MAX; i++)
        ADD(rejects[i]);
    for (size_t i = 0; i < STATUS_LAT_NB; i++)
        ADD(lat_bucket[i]);
    for (size_t i = 0; i < 3; i++)
        ADD(grey[i]);
    ADD(tls_ok); ADD(tls_failed); ADD(lat_sum_ms); ADD(lat_count);
    ADD(ev_emitted); ADD(ev_sent); ADD(ev_failed); ADD(ev_dropped);
    /* not the gauges: a retired worker's queue is nobody's now */
#undef ADD
}
