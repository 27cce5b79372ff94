/*
 * shape_wait.c - mail held by traffic shaping waits here (delivery_int.h,
 * HELD in mta_shape.c): per shaping entry (site x source), a min-heap of
 * (arrival, id), 32 bytes a message, the oldest first.
 *
 * PURPOSE   A held message costs its id and arrival, not an attempt: its
 *           queue file is closed, its envelope freed, nothing is written,
 *           no retry is counted and no log line is written.  It goes back
 *           into the schedule (at its arrival time, so the oldest of the
 *           site goes first) when the site may go: one per delivery to the
 *           site that finished (the connections pull the next), and a
 *           batch at the time the site said it may go (a rate's next slot,
 *           the end of a suspension; one timer for all sites).  A released
 *           message that still may not go comes back here.
 * CONTRACT  Only the worker's loop; an id may be here twice (held again
 *           after a rebuild put it back in the heap): the second start
 *           finds it done, or active.  A rebuild (kick *) empties the lists.
 */
#include <stdlib.h>
#include <string.h>

#include "common/ev.h"
#include "common/util.h"
#include "shape/shape.h"
#include "spool/spool.h"
#include "delivery/delivery_int.h"
#include "delivery/mta.h"

#define DL_WAIT_BATCH   8           /* released when the site's time comes */
#define DL_WAIT_AGAIN   1000        /* ms: look again if nothing came back */
#define DL_WAIT_LOOK    1000        /* ms: a suspended site's state is read
                                       this often (a load, no release) */

struct dl_held {
    uint64_t arrival;
    char     id[SPOOL_ID_SIZE];
};

struct dl_wait {
    struct dl_held *h;              /* min-heap on arrival */
    size_t          n, cap;
    uint64_t        wake_ms;        /* wall: release a batch then */
};


static void
dl_wait_up(struct dl_held *h, size_t i)
{
    while (i > 0) {
        size_t         p = (i - 1) / 2;
        struct dl_held x;

        if (h[p].arrival <= h[i].arrival)
            break;
        x = h[p];
        h[p] = h[i];
        h[i] = x;
        i = p;
    }
}

static void
dl_wait_down(struct dl_held *h, size_t n)
{
    size_t i = 0;

    for (;;) {
        size_t         l = 2 * i + 1, m = i;
        struct dl_held x;

        if (l < n && h[l].arrival < h[m].arrival)
            m = l;
        if (l + 1 < n && h[l + 1].arrival < h[m].arrival)
            m = l + 1;
        if (m == i)
            return;
        x = h[m];
        h[m] = h[i];
        h[i] = x;
        i = m;
    }
}

/* dl_wait_arm - the timer at the earliest wake of a list with ids. */
static void
dl_wait_arm(struct deliver *d)
{
    uint64_t now = util_wall_ms(), when = UINT64_MAX;
    size_t   e;

    for (e = 0; e < SHAPE_SLOTS; e++)
        if (d->waits[e] != NULL && d->waits[e]->n > 0 &&
            d->waits[e]->wake_ms < when)
            when = d->waits[e]->wake_ms;
    if (when == UINT64_MAX) {
        ev_timer_stop(d->loop, &d->wait_timer);
        return;
    }
    d->wait_at = when;
    ev_timer_start(d->loop, &d->wait_timer, when > now ? when - now : 0);
}

void
dl_wait_add(struct deliver *d, int e, const char *id, uint64_t arrival,
    uint64_t not_before)
{
    struct dl_wait *w;

    if (d->waits == NULL || e < 0 || e >= SHAPE_SLOTS) {
        dl_schedule(d, id, util_wall_ms() + DL_WAIT_AGAIN);
        return;
    }
    if ((w = d->waits[e]) == NULL)
        w = d->waits[e] = xcalloc(1, sizeof(*w));
    if (w->n == w->cap) {
        w->cap = w->cap ? w->cap * 2 : 16;
        w->h = xrealloc(w->h, w->cap * sizeof(*w->h));
    }
    w->h[w->n].arrival = arrival;
    util_strlcpy(w->h[w->n].id, id, SPOOL_ID_SIZE);
    dl_wait_up(w->h, w->n++);
    d->nwaiting++;
    /* the latest word on the site: when it said it may go, but looked at
     * every DL_WAIT_LOOK at least (mtactl resume, a reload's new rules) */
    if (not_before > util_wall_ms() + DL_WAIT_LOOK)
        not_before = util_wall_ms() + DL_WAIT_LOOK;
    w->wake_ms = not_before;
    if (!ev_timer_active(&d->wait_timer) || not_before < d->wait_at) {
        uint64_t now = util_wall_ms();

        d->wait_at = not_before;
        ev_timer_start(d->loop, &d->wait_timer,
            not_before > now ? not_before - now : 0);
    }
}

void
dl_wait_release(struct deliver *d, int e, size_t n)
{
    struct dl_wait *w;

    if (d->waits == NULL || e < 0 || e >= SHAPE_SLOTS ||
        (w = d->waits[e]) == NULL)
        return;
    while (n-- > 0 && w->n > 0) {
        struct dl_held x = w->h[0];

        w->h[0] = w->h[--w->n];
        dl_wait_down(w->h, w->n);
        d->nwaiting--;
        /* due at once; its arrival orders it before younger mail */
        dl_schedule(d, x.id, x.arrival < util_wall_ms() ? x.arrival : 0);
    }
    if (w->n == 0 && w->cap > 64) {
        free(w->h);                     /* an episode's peak goes */
        w->h = NULL;
        w->cap = 0;
    }
}

void
dl_wait_fire(struct ev_loop *loop, struct ev_timer *tm, void *arg)
{
    struct deliver *d = arg;
    uint64_t        now = util_wall_ms();
    size_t          e;

    (void)loop;
    (void)tm;
    for (e = 0; e < SHAPE_SLOTS; e++) {
        struct dl_wait *w = d->waits[e];

        if (w == NULL || w->n == 0 || w->wake_ms > now)
            continue;
        w->wake_ms = now + DL_WAIT_AGAIN;
        if (d->relay->shape_tab != NULL &&
            shape_suspended(d->relay->shape_tab, (int)e, now))
            continue;                   /* still: nothing to open */
        dl_wait_release(d, (int)e, DL_WAIT_BATCH);
    }
    dl_wait_arm(d);
}

void
dl_wait_clear(struct deliver *d)
{
    size_t e;

    if (d->waits == NULL)
        return;
    for (e = 0; e < SHAPE_SLOTS; e++) {
        if (d->waits[e] == NULL)
            continue;
        free(d->waits[e]->h);
        free(d->waits[e]);
        d->waits[e] = NULL;
    }
    d->nwaiting = 0;
    ev_timer_stop(d->loop, &d->wait_timer);
}

void
dl_wait_free(struct deliver *d)
{
    dl_wait_clear(d);
    free(d->waits);
    d->waits = NULL;
}
