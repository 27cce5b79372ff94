/*
 * deliver.c - the per-worker delivery schedule (early skeleton; the real
 * schedule replaces this within the session).
 */
#include <stdlib.h>

#include "common/util.h"
#include "worker/deliver.h"

struct deliver {
    unsigned shard, nshards;
};

struct deliver *
deliver_new(struct ev_loop *loop, const struct config *cfg, struct spool *sp,
    struct router *r, struct status_worker *st, unsigned shard,
    unsigned nshards)
{
    struct deliver *d = xcalloc(1, sizeof(*d));

    (void)loop; (void)cfg; (void)sp; (void)r; (void)st;
    d->shard = shard;
    d->nshards = nshards ? nshards : 1;
    return d;
}

void
deliver_free(struct deliver *d)
{
    free(d);
}

int
deliver_recover(struct deliver *d)
{
    (void)d;
    return 0;
}

void
deliver_submit(struct deliver *d, const char *id)
{
    (void)d; (void)id;
}

void
deliver_kick(struct deliver *d, const char *id)
{
    (void)d; (void)id;
}

size_t
deliver_drain(struct deliver *d)
{
    (void)d;
    return 0;
}

unsigned
deliver_shard_of(const char *id, unsigned nshards)
{
    unsigned v = 0;
    int      i;

    if (nshards == 0)
        return 0;
    for (i = 11; i < 13; i++) {
        char c = id[i];

        v = v * 16 + (unsigned)(c >= 'A' && c <= 'F' ? c - 'A' + 10 :
            c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= '0' && c <= '9' ?
            c - '0' : 0);
    }
    return v % nshards;
}
