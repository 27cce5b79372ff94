/*
 * router_bench.c - lookups per second of router_lookup() on a table of
 * 100,000 domains.
 *
 * PURPOSE   The router's lookup cost at scale: fills a fresh routes.mdb in a temp
 *           directory (or DIR given as argv[1]) with 100,000 domain keys
 *           "dN.example" plus 1,000 wildcard keys ".wN.example", then times
 *           three lookup mixes, each over many distinct addresses:
 *             hit       u@dN.example            (domain key)
 *             wildcard  u@host.sub.wN.example   (two parents up)
 *             miss      u@nN.invalid            (falls through to default)
 *           and prints lookups/s for each (best of 5 rounds, by wall
 *           clock and by process CPU time).  One process, one core.
 * FAILURE   Exits 1 with a message on any router error or a wrong match.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "router/router.h"

#define BENCH_DOMAINS    100000
#define BENCH_WILDCARDS  1000
#define BENCH_LOOKUPS    500000
#define BENCH_ROUNDS     5

static double
bench_clock(clockid_t id)
{
    struct timespec ts;

    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}


static void
bench_die(struct router *r, const char *what)
{
    fprintf(stderr, "router_bench: %s: %s\n", what, router_errstr(r));
    exit(1);
}


/* bench_fill - the table, in batches of 10,000 puts per transaction. */
static void
bench_fill(struct router *r)
{
    char    key[64], val[64];
    int     i;

    for (i = 0; i < BENCH_DOMAINS + BENCH_WILDCARDS; i++) {
        if (i % 10000 == 0 && router_begin(r) != ROUTER_OK)
            bench_die(r, "begin");
        if (i < BENCH_DOMAINS)
            snprintf(key, sizeof(key), "d%d.example", i);
        else
            snprintf(key, sizeof(key), ".w%d.example", i - BENCH_DOMAINS);
        snprintf(val, sizeof(val), "smtp:[10.%d.%d.%d]:25", (i >> 16) & 255,
            (i >> 8) & 255, i & 255);
        if (router_put(r, key, val) != ROUTER_OK)
            bench_die(r, "put");
        if (i % 10000 == 9999 || i == BENCH_DOMAINS + BENCH_WILDCARDS - 1)
            if (router_commit(r) != ROUTER_OK)
                bench_die(r, "commit");
    }
}


/* bench_run - BENCH_ROUNDS rounds of BENCH_LOOKUPS lookups of one kind;
 * the best round's rate by wall clock and by process CPU time (the latter
 * is steadier on a busy machine). */
static void
bench_run(struct router *r, const char *name, const char *fmt, int modulo,
    enum router_match want)
{
    static char addrs[4096][80];
    struct router_result res;
    double  w0, c0, wall, cpu, best_wall = 0, best_cpu = 0;
    int     i, round;

    /* Addresses are formatted up front so only the lookup is timed. */
    for (i = 0; i < 4096; i++)
        snprintf(addrs[i], sizeof(addrs[i]), fmt,
            (int)(((unsigned)i * 2654435761u) % (unsigned)modulo));
    for (round = 0; round < BENCH_ROUNDS; round++) {
        w0 = bench_clock(CLOCK_MONOTONIC);
        c0 = bench_clock(CLOCK_PROCESS_CPUTIME_ID);
        for (i = 0; i < BENCH_LOOKUPS; i++) {
            if (router_lookup(r, addrs[i & 4095], &res) != ROUTER_OK)
                bench_die(r, "lookup");
            if (res.match != want) {
                fprintf(stderr, "router_bench: %s: match %d, want %d\n",
                    addrs[i & 4095], res.match, want);
                exit(1);
            }
        }
        wall = BENCH_LOOKUPS / (bench_clock(CLOCK_MONOTONIC) - w0);
        cpu = BENCH_LOOKUPS / (bench_clock(CLOCK_PROCESS_CPUTIME_ID) - c0);
        if (wall > best_wall)
            best_wall = wall;
        if (cpu > best_cpu)
            best_cpu = cpu;
    }
    printf("router_bench: %-16s %10.0f lookups/s (wall, best of %d)  "
        "%10.0f lookups/CPU-s\n", name, best_wall, BENCH_ROUNDS, best_cpu);
}


int
main(int argc, char **argv)
{
    struct router *r = NULL;
    char    dir[256], path[300];
    double  t0;

    if (argc > 1)
        snprintf(dir, sizeof(dir), "%s", argv[1]);
    else {
        snprintf(dir, sizeof(dir), "/tmp/router_bench.XXXXXX");
        if (mkdtemp(dir) == NULL) {
            perror("router_bench: mkdtemp");
            return 1;
        }
    }
    snprintf(path, sizeof(path), "%s/routes.mdb", dir);
    if (router_open(&r, path, "smtp:[192.0.2.1]:25", 1) != ROUTER_OK)
        bench_die(r, "open");
    t0 = bench_clock(CLOCK_MONOTONIC);
    bench_fill(r);
    printf("router_bench: filled %d domains + %d wildcards in %.2fs\n",
        BENCH_DOMAINS, BENCH_WILDCARDS, bench_clock(CLOCK_MONOTONIC) - t0);
    bench_run(r, "domain hit", "user@d%d.example", BENCH_DOMAINS,
        ROUTER_MATCH_DOMAIN);
    bench_run(r, "wildcard hit", "user@host.sub.w%d.example",
        BENCH_WILDCARDS, ROUTER_MATCH_WILDCARD);
    bench_run(r, "miss -> default", "user@n%d.invalid", BENCH_DOMAINS,
        ROUTER_MATCH_DEFAULT);
    router_close(r);
    if (argc <= 1) {
        unlink(path);
        snprintf(path, sizeof(path), "%s/routes.mdb-lock", dir);
        unlink(path);
        rmdir(dir);
    }
    return 0;
}
