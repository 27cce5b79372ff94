/*
 * schedule.c - the arithmetic of deliver.c's schedule: the min-heap of
 * (next attempt, id) in struct deliver, the retry delays and the shard
 * that owns an id (delivery_int.h).  See the CONTRACT in deliver.c.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "spool/spool.h"
#include "delivery/delivery.h"
#include "delivery/delivery_int.h"

/* ---- the schedule: a binary min-heap on when ---- */

static void
dl_heap_swap(struct dl_entry *a, struct dl_entry *b)
{
    struct dl_entry t = *a;

    *a = *b;
    *b = t;
}


void
dl_heap_up(struct deliver *d, size_t i)
{
    while (i > 0) {
        size_t p = (i - 1) / 2;

        if (d->heap[p].when <= d->heap[i].when)
            break;
        dl_heap_swap(&d->heap[p], &d->heap[i]);
        i = p;
    }
}


static void
dl_heap_down(struct deliver *d, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;

        if (l < d->nheap && d->heap[l].when < d->heap[m].when)
            m = l;
        if (r < d->nheap && d->heap[r].when < d->heap[m].when)
            m = r;
        if (m == i)
            return;
        dl_heap_swap(&d->heap[m], &d->heap[i]);
        i = m;
    }
}


void
dl_heap_push(struct deliver *d, uint64_t when, const char *id)
{
    if (d->nheap == d->capheap) {
        d->capheap = d->capheap ? d->capheap * 2 : 64;
        d->heap = xrealloc(d->heap, d->capheap * sizeof(*d->heap));
    }
    d->heap[d->nheap].when = when;
    util_strlcpy(d->heap[d->nheap].id, id, SPOOL_ID_SIZE);
    dl_heap_up(d, d->nheap++);
}


void
dl_heap_pop(struct deliver *d, struct dl_entry *out)
{
    *out = d->heap[0];
    d->heap[0] = d->heap[--d->nheap];
    if (d->nheap > 0)
        dl_heap_down(d, 0);
}

static int
dl_id_cmp(const void *a, const void *b)
{
    return strcmp(a, b);
}


void
dl_heap_tidy(struct deliver *d)
{
    size_t i, j;

    if (d->nstale == 0)
        return;
    qsort(d->stale, d->nstale, sizeof(*d->stale), dl_id_cmp);
    for (i = j = 0; i < d->nheap; i++) {
        /* a candidate released (or flushed) since its kick is kept */
        if (bsearch(d->heap[i].id, d->stale, d->nstale, sizeof(*d->stale),
                dl_id_cmp) != NULL && qx_is_out(d, d->heap[i].id))
            continue;
        d->heap[j++] = d->heap[i];
    }
    d->nheap = j;
    for (i = d->nheap / 2; i-- > 0;)
        dl_heap_down(d, i);
    free(d->stale);
    d->stale = NULL;
    d->nstale = d->capstale = 0;
}


/* ---- pure helpers (deliver_int.h) ---- */

uint64_t
deliver_retry_delay(const uint64_t *retry_ms, size_t nretry,
    unsigned attempts)
{
    size_t i;

    if (nretry == 0)
        return 60000;
    i = attempts == 0 ? 0 : attempts - 1;
    if (i >= nretry)
        i = nretry - 1;
    return retry_ms[i];
}


uint64_t
deliver_next_retry(const uint64_t *retry_ms, size_t nretry,
    unsigned attempts, uint64_t now, uint64_t arrival, uint64_t max_queue)
{
    uint64_t next = now + deliver_retry_delay(retry_ms, nretry, attempts);
    uint64_t expire = arrival + max_queue;

    /* one last try when the message expires, not a whole step later */
    if (max_queue > 0 && next > expire)
        next = expire > now ? expire : now;
    return next;
}


unsigned
deliver_shard_of(const char *id, unsigned nshards)
{
    if (nshards == 0 || !spool_id_valid(id))
        return 0;                       /* not an id: shard 0 takes it */
    return spool_id_shard(id) % nshards;
}
