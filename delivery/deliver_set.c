/*
 * deliver_set.c - what the worker hands delivery after deliver_new(): the
 * status page's throttle word, bounce-class counting and next-hop health
 * tables, the shaping rules and table; and the gauges it reads back once a
 * second
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include "common/buf.h"
#include "common/ev.h"
#include "common/log.h"
#include "common/logfmt.h"
#include "common/status.h"
#include "common/util.h"
#include "config/config.h"
#include "router/router.h"
#include "spool/spool.h"
#include "bclass/bclass.h"
#include "delivery/delivery.h"
#include "delivery/delivery_int.h"
#include "delivery/dsn.h"
#include "delivery/maildir.h"
#include "delivery/mta.h"
#include "tlspol/tlspol.h"
#include "delivery/resolve.h"


void
deliver_set_health(struct deliver *d, struct status_page *sp)
{
    mta_set_health(d->relay, sp, d->cfg->host_down_for_ms,
        d->cfg->host_down_max_ms);
}


void
deliver_set_throttle(struct deliver *d, const uint32_t *throttle)
{
    d->throttle = throttle;
}


void
deliver_set_page(struct deliver *d, struct status_page *page)
{
    d->page = page;
}


void
deliver_set_shaping(struct deliver *d, const struct shape_rules *rules,
    struct shape_table *tab, unsigned slot)
{
    mta_set_shaping(d->relay, rules, tab, slot);
    mta_set_shape_report(d->relay, dl_event_shape, d);
    if (rules == NULL || d->relay->shape == NULL || d->waits != NULL)
        return;
    d->waits = xcalloc(SHAPE_SLOTS, sizeof(*d->waits));
    ev_timer_init(&d->wait_timer, dl_wait_fire, d);
}


void
deliver_gauges(const struct deliver *d, uint64_t *active, uint64_t *due,
    uint64_t *deferred)
{
    uint64_t now = util_wall_ms();
    size_t   i;

    *active = d->nactive;
    *due = d->nwaiting;                 /* held by shaping: due, waiting */
    *deferred = 0;
    for (i = 0; i < d->nheap; i++) {
        if (d->heap[i].when <= now)
            (*due)++;
        else
            (*deferred)++;
    }
}
