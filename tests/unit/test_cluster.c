/*
 * test_cluster.c - cluster/'s pure parts: a limit's share per node, key
 * names, lease expiry, the token stock a node asks for; and the shaping table's fleet mode (grants and tokens spent by
 * the workers' checks, demand counted, the GCRA's refusal giving the
 * token back).
 */
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>

#include "cluster/cluster.h"
#include "shape/shape.h"

Test(cluster, share_is_the_limit_over_the_nodes_at_least_one)
{
    cr_assert_eq(cluster_share(10, 3), 3);      /* never above: floor */
    cr_assert_eq(cluster_share(9, 3), 3);
    cr_assert_eq(cluster_share(2, 3), 1);       /* at least 1 */
    cr_assert_eq(cluster_share(7, 0), 7);       /* no node known: 1 */
    cr_assert_eq(cluster_share(7, 1), 7);
    cr_assert_eq(cluster_share(0, 3), 0);       /* no limit stays none */
}

Test(cluster, key_names)
{
    char k[64];

    cr_assert_eq(cluster_key(k, sizeof(k), "mtad:", "conn", "google",
        "pool-a", NULL), (int)strlen("mtad:conn:google|pool-a"));
    cr_assert_str_eq(k, "mtad:conn:google|pool-a");
    cluster_key(k, sizeof(k), "x:", "rate", "s", "d", "min");
    cr_assert_str_eq(k, "x:rate:s|d:min");
    cr_assert_eq(cluster_key(k, 8, "mtad:", "conn", "google", "a", NULL), -1);
}

Test(cluster, lease_lives_three_intervals_and_at_least_a_second)
{
    uint64_t n = 0;

    cr_assert_eq(cluster_lease_ms(100), 1000);
    cr_assert_eq(cluster_lease_ms(500), 1500);
    cr_assert(cluster_lease_live("4:0:2000", 1999, &n));
    cr_assert_eq(n, 4);
    cr_assert_not(cluster_lease_live("4:0:2000", 2000, &n));   /* expired */
    cr_assert(cluster_lease_live("3:2000", 10, &n));
    cr_assert_not(cluster_lease_live("x:2000", 10, &n));
    cr_assert_not(cluster_lease_live("3", 10, &n));
}

Test(cluster, stock_is_two_intervals_of_the_rate_over_the_nodes)
{
    /* 100/s, 100 ms, 3 nodes: 100 * 0.2 / 3 = 6.67 -> 7 */
    cr_assert_eq(cluster_stock(100, 1000, 100, 3, 0), 7);
    /* 60/min: far below one per cycle: 1 */
    cr_assert_eq(cluster_stock(60, 60000, 100, 3, 0), 1);
    /* capped by the bucket */
    cr_assert_eq(cluster_stock(1000, 1000, 100, 1, 5), 5);
    cr_assert_eq(cluster_stock(0, 1000, 100, 1, 5), 0);
    cr_assert_eq(cluster_stock(10, 1000, 100, 0, 0), 2);   /* 0 nodes: 1 */
}

Test(cluster, fleet_mode_grants_and_tokens)
{
    struct shape_table *t = shape_table_create();
    struct shape_limits lim;
    struct shape_fleet  f;
    uint64_t            nb = 0, now = 1000000;
    int                 e;

    cr_assert_not_null(t);
    shape_fleet_on(t, 100000);
    cr_assert(shape_fleet_is(t));
    e = shape_entry(t, "google", "default");
    memset(&lim, 0, sizeof(lim));
    lim.connections = 5;
    lim.rate[SHAPE_R_SEC].n = 1000;
    lim.rate[SHAPE_R_SEC].per_ms = 1000;
    lim.burst = 10;
    /* a new pair: no grant, no token: waits for the agent */
    cr_assert_eq(shape_conn_take(t, e, 0, lim.connections), -1);
    cr_assert(shape_conn_full(t, e, lim.connections));
    cr_assert_eq(shape_may(t, e, &lim, SHAPE_R_SEC, 1, now, 0, &nb), -1);
    cr_assert_eq(nb, now + 100000);
    shape_fleet_get(t, e, &f);
    cr_assert_geq(f.conn_want, 1);
    cr_assert_eq(f.want[SHAPE_FLEET_MSG], 1);
    /* granted 2 connections, 2 tokens */
    shape_fleet_grant(t, e, 2);
    shape_fleet_add(t, e, SHAPE_FLEET_MSG, 2, now, 0);
    cr_assert_eq(shape_conn_take(t, e, 0, lim.connections), 0);
    cr_assert_eq(shape_conn_take(t, e, 1, lim.connections), 0);
    cr_assert_eq(shape_conn_take(t, e, 1, lim.connections), -1);
    cr_assert_eq(shape_may(t, e, &lim, SHAPE_R_SEC, 1, now, 0, &nb), 0);
    cr_assert_eq(shape_may(t, e, &lim, SHAPE_R_SEC, 0, now, 0, &nb), 0);
    cr_assert_eq(shape_may(t, e, &lim, SHAPE_R_SEC, 1, now, 0, &nb), 0);
    cr_assert_eq(shape_may(t, e, &lim, SHAPE_R_SEC, 1, now, 0, &nb), -1);
    shape_fleet_get(t, e, &f);
    cr_assert_eq(f.tokens[SHAPE_FLEET_MSG], 0);
    cr_assert_eq(f.used[SHAPE_FLEET_MSG], 2);
    cr_assert_eq(f.conns, 2);
    /* the fleet's token is the rate's check: no local GCRA on top */
    lim.burst = 0;
    lim.rate[SHAPE_R_SEC].n = 1;
    shape_fleet_add(t, e, SHAPE_FLEET_MSG, 1, now, 0);
    cr_assert_eq(shape_may(t, e, &lim, SHAPE_R_SEC, 1, now, 0, &nb), 0);
    cr_assert_eq(shape_fleet_drain(t, e, SHAPE_FLEET_MSG), 0);
    /* reserved times: 3 tokens from now + 500 us, 1000 us apart */
    e = shape_entry(t, "timed", "default");   /* a fresh local GCRA */
    lim.rate[SHAPE_R_SEC].n = 1000000;
    shape_fleet_add(t, e, SHAPE_FLEET_MSG, 3, now + 500, 1000);
    cr_assert_eq(shape_may(t, e, &lim, SHAPE_R_SEC, 1, now, 0, &nb), -1);
    cr_assert_eq(nb, now + 500);            /* not before its time */
    cr_assert_eq(shape_may(t, e, &lim, SHAPE_R_SEC, 1, now + 500, 0, &nb),
        0);
    cr_assert_eq(shape_may(t, e, &lim, SHAPE_R_SEC, 1, now + 600, 0, &nb),
        -1);
    cr_assert_eq(nb, now + 1500);
    cr_assert_eq(shape_may(t, e, &lim, SHAPE_R_SEC, 1, now + 1500, 0, &nb),
        0);
    /* a slot missed by more than a slot (burst 0) lapses: 3 tokens for
     * now + 10 ms, 11 ms, 12 ms; at now + 11.5 ms the first is lost, the
     * second goes, the third waits for its time */
    shape_fleet_add(t, e, SHAPE_FLEET_MSG, 3, now + 10000, 1000);
    cr_assert_eq(shape_may(t, e, &lim, SHAPE_R_SEC, 1, now + 11500, 0, &nb),
        0);
    cr_assert_eq(shape_may(t, e, &lim, SHAPE_R_SEC, 1, now + 11600, 0, &nb),
        -1);
    cr_assert_eq(nb, now + 12000);
    shape_fleet_get(t, e, &f);
    cr_assert_eq(f.tokens[SHAPE_FLEET_MSG], 1);
    /* a pair without limits is not held back by the fleet */
    e = shape_entry(t, "open", "default");
    memset(&lim, 0, sizeof(lim));
    cr_assert_eq(shape_conn_take(t, e, 0, 0), 0);
    cr_assert_eq(shape_may(t, e, &lim, SHAPE_R_SEC, 1, now, 0, &nb), 0);
}
