/*
 * test_egress.c - egress sources and pools: relay.yaml's egress section
 * (config_egress.c: what it accepts, every error with file:line:col) and
 * the weighted pick of delivery/mta_egress.c (the split over 10,000
 * messages, per message and through connections that each carry many,
 * gone sources, an allow() refusal).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/ev.h"
#include "common/util.h"
#include "config/config.h"
#include "delivery/mta.h"

static char tdir[64];
static char tpath[128];
static char terr[8192];

static void
te_setup(void)
{
    snprintf(tdir, sizeof(tdir), "/tmp/mtad-test-egress-XXXXXX");
    cr_assert_not_null(mkdtemp(tdir));
    snprintf(tpath, sizeof(tpath), "%s/relay.yaml", tdir);
}

static void
te_teardown(void)
{
    unlink(tpath);
    rmdir(tdir);
}

TestSuite(egress, .init = te_setup, .fini = te_teardown);

static struct config *
te_load(const char *text)
{
    FILE *fp = fopen(tpath, "w");

    cr_assert_not_null(fp);
    fputs("routes:\n  default: mx\n", fp);
    fputs(text, fp);
    cr_assert_eq(fclose(fp), 0);
    return config_load(tpath, terr, sizeof(terr));
}

/* te_bad - text must fail with exactly want ("%P" where the path goes,
 * lines 1-2 are te_load's routes section). */
static void
te_bad(const char *text, const char *want)
{
    char   exp[8192];
    size_t o = 0;

    cr_assert_null(te_load(text), "accepted:\n%s", text);
    for (; *want != '\0' && o + sizeof(tpath) < sizeof(exp); want++) {
        if (want[0] == '%' && want[1] == 'P') {
            o += util_strlcpy(exp + o, tpath, sizeof(exp) - o);
            want++;
        } else {
            exp[o++] = *want;
        }
    }
    exp[o] = '\0';
    cr_assert_str_eq(terr, exp);
}

static const char four[] =
    "egress:\n"
    "  sources:\n"
    "    - {name: a, address: 127.0.0.2, ehlo: a.mtad.test}\n"
    "    - {name: b, address: 127.0.0.3, ehlo: b.mtad.test}\n"
    "    - {name: c, address: 127.0.0.4, ehlo: c.mtad.test}\n"
    "    - {name: d, address: \"::1\", ehlo: d.mtad.test}\n"
    "  pools:\n"
    "    - name: small\n"
    "      sources: [a]\n"
    "    - name: bulk\n"
    "      sources: {a: 1, b: 2, c: 3, d: 4}\n"
    "  default_pool: bulk\n";

Test(egress, sources_pools_and_the_default_pool)
{
    struct config *cfg = te_load(four);

    cr_assert_not_null(cfg, "%s", terr);
    cr_assert_eq(cfg->negress_sources, 4);
    cr_expect_str_eq(cfg->egress_sources[3].ehlo, "d.mtad.test");
    cr_expect_eq(cfg->egress_sources[3].addr.ss_family, AF_INET6);
    cr_assert_eq(cfg->negress_pools, 2);
    cr_expect_eq(cfg->egress_default, 1);
    cr_expect_eq(cfg->egress_pools[1].m[2].source, 2);
    cr_expect_eq(cfg->egress_pools[1].m[3].weight, 4);
    cr_expect_eq(cfg->egress_pools[0].m[0].weight, 1);
    cr_expect_eq(cfg->egress_recheck_ms, 60000);
    config_free(cfg);

    /* sources alone: one pool "default" of them all */
    cfg = te_load("egress:\n  sources:\n"
        "    - {name: a, address: 127.0.0.2, ehlo: a.mtad.test}\n"
        "    - {name: b, address: 127.0.0.3, ehlo: b.mtad.test}\n"
        "  recheck_interval: 5s\n");
    cr_assert_not_null(cfg, "%s", terr);
    cr_assert_eq(cfg->negress_pools, 1);
    cr_expect_str_eq(cfg->egress_pools[0].name, "default");
    cr_expect_eq(cfg->egress_pools[0].nm, 2);
    cr_expect_eq(cfg->egress_recheck_ms, 5000);
    config_free(cfg);

    /* no section: none (delivery's implicit source) */
    cfg = te_load("");
    cr_assert_not_null(cfg, "%s", terr);
    cr_expect_eq(cfg->negress_sources, 0);
    cr_expect_eq(cfg->negress_pools, 0);
    config_free(cfg);
}

Test(egress, every_error_names_its_place)
{
    te_bad("egress:\n  sources:\n"
        "    - {name: a, address: 10.0.0.300, ehlo: a.test}\n"
        "    - {name: \"b c\", address: 10.0.0.2, ehlo: b.test}\n"
        "    - {name: c, address: \"[::1]:25\", ehlo: c.test}\n"
        "    - {name: d, address: 10.0.0.4}\n"
        "    - {name: e, address: 10.0.0.5, ehlo: e.test, port: 25}\n",
        "%P:5:26: egress.sources[0].address: expected an IPv4 or IPv6 "
        "address (no port, no brackets), got '10.0.0.300'\n"
        "%P:6:14: egress.sources[1].name: expected a name (letters, digits, "
        "'.', '_', '-'; at most 63), got 'b c'\n"
        "%P:7:26: egress.sources[2].address: expected an IPv4 or IPv6 "
        "address (no port, no brackets), got '[::1]:25'\n"
        "%P:8:7: egress.sources[3].ehlo: required key is missing (the name "
        "the address's PTR gives)\n"
        "%P:9:50: egress.sources[4].port: unknown key 'port' (expected one "
        "of: name, address, ehlo)");
    te_bad("egress:\n  sources:\n"
        "    - {name: a, address: 10.0.0.1, ehlo: a.test}\n"
        "    - {name: a, address: 10.0.0.2, ehlo: b.test}\n"
        "    - {name: c, address: 10.0.0.1, ehlo: c.test}\n",
        "%P:6:7: egress.sources[1]: name a is listed twice (also "
        "egress.sources[0])\n"
        "%P:7:7: egress.sources[2]: address 10.0.0.1 is listed twice (also "
        "egress.sources[0])");
    te_bad("egress:\n  sources:\n"
        "    - {name: a, address: 10.0.0.1, ehlo: a.test}\n"
        "  pools:\n"
        "    - {name: p, sources: {a: 0}}\n"
        "    - {name: q, sources: {zz: 1}}\n"
        "    - {name: r, sources: []}\n"
        "    - {name: s}\n"
        "  default_pool: nope\n",
        "%P:7:30: egress.pools[0].sources.a: expected a weight 1-1000, got "
        "'0'\n"
        "%P:9:26: egress.pools[2].sources: a pool needs at least one "
        "source\n"
        "%P:10:7: egress.pools[3].sources: required key is missing\n"
        "%P:8:27: egress.pools[1] q: no source named zz in egress.sources\n"
        "%P:11:17: egress.default_pool: no pool named nope in "
        "egress.pools");
    te_bad("egress:\n  pools:\n    - {name: p, sources: [a]}\n",
        "%P:5:7: egress.pools: no egress.sources to draw from");
}


/* ---- the pick ---- */

struct te_relay {
    struct ev_loop  *loop;
    struct mta      *r;
    struct config   *cfg;
    struct mta_dest  d;
};

static void
te_relay(struct te_relay *t, const char *pool)
{
    t->cfg = te_load(four);
    cr_assert_not_null(t->cfg, "%s", terr);
    t->loop = ev_new();
    t->r = mta_new(t->loop, "me.test", 1000, 4);
    mta_set_egress(t->r, t->cfg);
    memset(&t->d, 0, sizeof(t->d));
    t->d.pool = mta_egress_pool(t->r, pool);
    cr_assert_geq(t->d.pool, 0);
}

static void
te_relay_free(struct te_relay *t)
{
    mta_free(t->r);
    ev_free(t->loop);
    config_free(t->cfg);
}

/* te_share - counts[i] / n against weight w of 10 within pct percent. */
static void
te_share(const unsigned *counts, unsigned n, double pct)
{
    static const double w[4] = { 1, 2, 3, 4 };
    int i;

    for (i = 0; i < 4; i++) {
        double want = n * w[i] / 10.0;

        cr_expect(counts[i] >= want * (1 - pct / 100) &&
            counts[i] <= want * (1 + pct / 100), "source %d: %u of %u, "
            "want %.0f +- %.1f%%", i, counts[i], n, want, pct);
    }
}

Test(egress, pick_splits_messages_by_weight)
{
    struct te_relay t;
    struct mta_conn c;
    struct mta_txn  tx;
    unsigned        counts[4] = { 0 }, i;
    uint64_t        nb;
    int             src;

    te_relay(&t, NULL);             /* the default pool: bulk */
    cr_expect_str_eq(mta_egress_pool_name(t.r, 0), "bulk");
    cr_expect_str_eq(mta_egress_pool_name(t.r, t.d.pool), "bulk");
    cr_expect_eq(mta_egress_pool(t.r, "small"), 1);
    cr_expect_eq(mta_egress_pool(t.r, "nope"), -1);
    memset(&c, 0, sizeof(c));
    memset(&tx, 0, sizeof(tx));
    c.r = t.r;
    c.dest = &t.d;
    for (i = 0; i < 10000; i++) {
        src = mta_egress_pick(t.r, &t.d, NULL, NULL, &nb);
        cr_assert(src >= 0 && src < 4);
        c.src = src;
        mta_egress_take(&c, &tx);
        counts[src]++;
    }
    te_share(counts, 10000, 0.5);
    cr_expect_str_eq(tx.src_name, mta_source_name(t.r, c.src));
    cr_expect_str_eq(mta_source_name(t.r, 3), "d");
    te_relay_free(&t);
}

/*
 * Four connections, each taking message after message as a receiver
 * answers them: the split must still follow the weights, not the
 * connections (4 connections cannot be 1:2:3:4).  A connection that is
 * unfair closes and the next one comes from mta_egress_pick().
 */
Test(egress, connections_carrying_many_messages_keep_the_split)
{
    struct te_relay t;
    struct mta_conn c[4];
    struct mta_txn  tx;
    unsigned        counts[4] = { 0 }, i, reopened = 0;
    uint64_t        nb;

    te_relay(&t, "bulk");
    memset(&tx, 0, sizeof(tx));
    for (i = 0; i < 4; i++) {
        memset(&c[i], 0, sizeof(c[i]));
        c[i].r = t.r;
        c[i].dest = &t.d;
        c[i].src = mta_egress_pick(t.r, &t.d, NULL, NULL, &nb);
        mta_egress_take(&c[i], &tx);
        counts[c[i].src]++;
    }
    for (i = 4; i < 10000; i++) {
        struct mta_conn *k = &c[i % 4];

        if (!mta_egress_fair(k, NULL, NULL)) {
            k->src = mta_egress_pick(t.r, &t.d, NULL, NULL, &nb);
            reopened++;
        }
        mta_egress_take(k, &tx);
        counts[k->src]++;
    }
    te_share(counts, 10000, 2.0);
    /* each connection carries many messages: few are replaced */
    cr_expect_lt(reopened, 10000 / MTA_EGRESS_SLACK / 2, "%u reopened",
        reopened);
    te_relay_free(&t);
}

static int
te_no_c(void *arg, struct mta_dest *d, int src, uint64_t *not_before)
{
    (void)arg;
    (void)d;
    if (src != 2)
        return 1;
    *not_before = 12345;
    return 0;
}

static int
te_none(void *arg, struct mta_dest *d, int src, uint64_t *not_before)
{
    (void)arg;
    (void)d;
    *not_before = 1000 + (uint64_t)src;
    return 0;
}

Test(egress, gone_sources_and_allow_refusals_are_skipped)
{
    struct te_relay t;
    struct mta_conn c;
    struct mta_txn  tx;
    unsigned        i, counts[4] = { 0 };
    uint64_t        nb;
    int             src;

    te_relay(&t, "bulk");
    memset(&c, 0, sizeof(c));
    memset(&tx, 0, sizeof(tx));
    c.r = t.r;
    c.dest = &t.d;
    t.r->src[3].down = 1;           /* d's address is gone */
    for (i = 0; i < 600; i++) {
        src = mta_egress_pick(t.r, &t.d, te_no_c, NULL, &nb);
        cr_assert(src == 0 || src == 1, "picked %d", src);
        c.src = src;
        mta_egress_take(&c, &tx);
        counts[src]++;
    }
    cr_expect(counts[1] >= 390 && counts[1] <= 410, "b: %u of 600",
        counts[1]);
    cr_expect_eq(mta_egress_pick(t.r, &t.d, te_none, NULL, &nb), -1);
    cr_expect_eq(nb, 1000, "the earliest not_before: %lu",
        (unsigned long)nb);
    for (i = 0; i < 4; i++)
        t.r->src[i].down = 1;
    cr_expect_eq(mta_egress_pick(t.r, &t.d, NULL, NULL, &nb), -1);
    cr_expect_eq(nb, 0, "no usable source at all");
    te_relay_free(&t);
}

Test(egress, no_section_is_one_implicit_source)
{
    struct ev_loop *loop = ev_new();
    struct mta     *r = mta_new(loop, "me.test", 1000, 1);
    struct mta_dest d;
    struct mta_conn c;
    uint64_t        nb;

    memset(&d, 0, sizeof(d));
    memset(&c, 0, sizeof(c));
    cr_expect_eq(mta_egress_pool(r, NULL), 0);
    cr_expect_eq(mta_egress_pool(r, "default"), 0);
    cr_expect_eq(mta_egress_pool(r, "bulk"), -1);
    cr_expect_eq(mta_egress_pick(r, &d, NULL, NULL, &nb), 0);
    cr_expect_str_eq(mta_source_name(r, 0), "default");
    c.r = r;
    c.dest = &d;
    cr_expect_str_eq(mta_egress_helo(&c), "me.test");
    cr_expect_eq(mta_egress_fair(&c, NULL, NULL), 1);
    mta_free(r);
    ev_free(loop);
}
