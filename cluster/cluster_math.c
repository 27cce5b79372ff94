/*
 * cluster_math.c - the pure parts of the fleet (cluster.h): shares, key
 * names, lease expiry, token stocks.  No I/O.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster.h"

uint32_t
cluster_share(uint32_t limit, uint32_t nodes)
{
    uint32_t s;

    if (limit == 0)
        return 0;
    if (nodes == 0)
        nodes = 1;
    s = limit / nodes;
    return s > 0 ? s : 1;
}

int
cluster_key(char *out, size_t outsz, const char *prefix, const char *kind,
    const char *site, const char *source, const char *suffix)
{
    int n = snprintf(out, outsz, "%s%s:%s|%s%s%s", prefix, kind, site,
        source, suffix ? ":" : "", suffix ? suffix : "");

    return n < 0 || (size_t)n >= outsz ? -1 : n;
}

uint64_t
cluster_lease_ms(uint64_t sync_ms)
{
    return sync_ms * 3 < 1000 ? 1000 : sync_ms * 3;
}

int
cluster_lease_live(const char *v, uint64_t now_ms, uint64_t *n)
{
    const char        *p = v;
    char              *e;
    unsigned long long first = 0, x = 0;
    int                k;

    /* "n:expiry" or "n:b:expiry": the first number and the last */
    for (k = 0; k < 3; k++) {
        x = strtoull(p, &e, 10);
        if (e == p)
            return 0;
        if (k == 0)
            first = x;
        if (*e == '\0')
            break;
        if (*e != ':')
            return 0;
        p = e + 1;
    }
    if (k == 0 || *e != '\0' || x <= now_ms)
        return 0;
    *n = first;
    return 1;
}

uint32_t
cluster_stock(uint32_t n, uint64_t per_ms, uint64_t sync_ms, uint32_t nodes,
    uint32_t cap)
{
    uint64_t want;

    if (n == 0 || per_ms == 0)
        return 0;
    if (nodes == 0)
        nodes = 1;
    /* ceil(n * 2 * sync / per / nodes) */
    want = ((uint64_t)n * 2 * sync_ms + per_ms * nodes - 1) /
        (per_ms * nodes);
    if (want < 1)
        want = 1;
    if (cap > 0 && want > cap)
        want = cap;
    return (uint32_t)want;
}
