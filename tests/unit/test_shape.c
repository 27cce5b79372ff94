/*
 * test_shape.c - shape/: the GCRA, the slow ramp, globs, sites and the
 * precedence of site blocks, back-off rule matching, rules-file errors
 * with their line:col, and the shared table's limits (connections with a
 * dead worker's share cleared, rates, episodes).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "shape/shape.h"

static struct shape_rules *
parse(const char *text)
{
    struct shape_rules *r = NULL;
    char                err[512];

    cr_assert_eq(shape_rules_parse("relay.yaml", text, strlen(text), &r, err,
        sizeof(err)), 0, "%s", err);
    return r;
}

static void
parse_fails(const char *text, const char *want)
{
    struct shape_rules *r = NULL;
    char                err[512];

    cr_assert_eq(shape_rules_parse("relay.yaml", text, strlen(text), &r, err,
        sizeof(err)), -1, "no error for: %s", text);
    cr_assert_null(r);
    cr_assert(strstr(err, want) != NULL, "error \"%s\" lacks \"%s\"", err,
        want);
}

Test(shape, gcra_spacing_and_burst)
{
    uint64_t tat = 0, nb = 0;
    int      i;

    /* 10/s, burst 2: three at once, then one per 100 ms */
    for (i = 0; i < 3; i++)
        cr_assert_eq(shape_gcra(&tat, 1000000, 100000, 2, &nb), 0);
    cr_assert_eq(shape_gcra(&tat, 1000000, 100000, 2, &nb), -1);
    cr_assert_eq(nb, 1100000);
    cr_assert_eq(shape_gcra(&tat, 1099999, 100000, 2, &nb), -1);
    cr_assert_eq(shape_gcra(&tat, 1100000, 100000, 2, &nb), 0);
    /* no burst: strict spacing */
    tat = 0;
    cr_assert_eq(shape_gcra(&tat, 5000, 1000, 0, &nb), 0);
    cr_assert_eq(shape_gcra(&tat, 5500, 1000, 0, &nb), -1);
    cr_assert_eq(nb, 6000);
    /* an idle bucket does not save up beyond its burst */
    cr_assert_eq(shape_gcra(&tat, 1000000, 1000, 0, &nb), 0);
    cr_assert_eq(shape_gcra(&tat, 1000000, 1000, 0, &nb), -1);
}

Test(shape, interval_and_factor)
{
    struct shape_rate r = { 60, 60000 };

    cr_assert_eq(shape_interval_us(&r, 1000), 1000000);
    cr_assert_eq(shape_interval_us(&r, 500), 2000000);
    r.n = 0;
    cr_assert_eq(shape_interval_us(&r, 500), 0);
}

Test(shape, ramp_steps)
{
    struct shape_action a;
    uint32_t            step;

    memset(&a, 0, sizeof(a));
    a.act = SHAPE_ACT_SLOW;
    a.factor = 250;
    a.for_ms = 1000;
    a.steps = 3;
    a.step_ms = 500;
    cr_assert_eq(shape_ramp(&a, 10000, 10000, &step), 250);
    cr_assert_eq(step, 0);
    cr_assert_eq(shape_ramp(&a, 10000, 10999, &step), 250);
    cr_assert_eq(shape_ramp(&a, 10000, 11000, &step), 437);
    cr_assert_eq(step, 1);
    cr_assert_eq(shape_ramp(&a, 10000, 11500, &step), 625);
    cr_assert_eq(step, 2);
    cr_assert_eq(shape_ramp(&a, 10000, 12000, &step), 812);
    cr_assert_eq(step, 3);
    cr_assert_eq(shape_ramp(&a, 10000, 12500, &step), 1000);
    cr_assert_eq(step, 4);
    a.steps = 0;
    cr_assert_eq(shape_ramp(&a, 10000, 11000, &step), 1000);
    cr_assert_eq(step, 1);
}

Test(shape, glob)
{
    cr_assert(shape_glob("*.google.com", "alt1.gmail-smtp-in.l.GOOGLE.com"));
    cr_assert(shape_glob("mx?.yahoo*", "mx1.yahoodns.net"));
    cr_assert(!shape_glob("*.google.com", "google.com"));
    cr_assert(!shape_glob("mx?.x", "mx12.x"));
}

static const char *RULES =
    "hostname: x\n"
    "shaping:\n"
    "  defaults:\n"
    "    connections: 20\n"
    "    deliveries_per_minute: 1000\n"
    "  sites:\n"
    "    - name: google\n"
    "      mx: [.google.com]\n"
    "      connections: 5\n"
    "      sources:\n"
    "        a: { connections: 2 }\n"
    "    - name: l-google\n"
    "      mx: [.l.google.com]\n"
    "      messages_per_connection: 7\n"
    "    - name: glob\n"
    "      mx: ['mx*.yahoodns.net']\n"
    "    - name: gmail-only\n"
    "      domains: [gmail.com]\n"
    "      burst: 3\n"
    "  backoff:\n"
    "    - enhanced: 4.7.28\n"
    "      action: slow\n"
    "      factor: 25%\n"
    "    - code: 5xx\n"
    "      text: 'policy block'\n"
    "      action: bounce\n"
    "    - kind: connect\n"
    "      action: suspend\n"
    "      for: 30s\n";

Test(shape, site_precedence)
{
    struct shape_rules *r = parse(RULES);
    struct shape_limits l;
    char                site[SHAPE_NAME_MAX];
    const char         *g[] = { "gmail-smtp-in.l.google.com",
                                "alt1.gmail-smtp-in.l.google.com" };
    const char         *other[] = { "mx1.example.net", "mx2.example.net" };
    const char         *lit[] = { "127.0.1.1" };
    const char         *y[] = { "mx2.yahoodns.net" };
    int                 b;

    /* the longer suffix wins over .google.com; unset keys from defaults */
    b = shape_site(r, "googlemail.com", g, 2, site);
    cr_assert_str_eq(site, "l-google");
    shape_limits_of(r, b, "default", &l);
    cr_assert_eq(l.messages_per_connection, 7);
    cr_assert_eq(l.connections, 20);
    cr_assert_eq(l.rate[SHAPE_R_MIN].n, 1000);
    /* a listed domain beats any MX match */
    b = shape_site(r, "gmail.com", g, 2, site);
    cr_assert_str_eq(site, "gmail-only");
    shape_limits_of(r, b, "default", &l);
    cr_assert_eq(l.burst, 3);
    /* a source's own keys */
    b = shape_site(r, "x.org", (const char *[]){ "aspmx.google.com" }, 1,
        site);
    cr_assert_str_eq(site, "google");
    shape_limits_of(r, b, "a", &l);
    cr_assert_eq(l.connections, 2);
    shape_limits_of(r, b, "b", &l);
    cr_assert_eq(l.connections, 5);
    b = shape_site(r, "yahoo.com", y, 1, site);
    cr_assert_str_eq(site, "glob");
    /* unmatched: the lowest MX host's parent; literals: the domain */
    b = shape_site(r, "example.net", other, 2, site);
    cr_assert_eq(b, -1);
    cr_assert_str_eq(site, "example.net");
    b = shape_site(r, "lit.test", lit, 1, site);
    cr_assert_str_eq(site, "lit.test");
    b = shape_site(r, NULL, lit, 1, site);
    cr_assert_str_eq(site, "127.0.1.1");
    cr_assert_str_eq(shape_site_of_domain(r, "GMAIL.com"), "gmail-only");
    cr_assert_null(shape_site_of_domain(r, "yahoo.com"));
    shape_rules_free(r);
}

Test(shape, backoff_match)
{
    struct shape_rules *r = parse(RULES);
    struct shape_action a;

    shape_backoff_match(r, -1, "421 4.7.28 unusual rate", SHAPE_K_REPLY,
        NULL, &a);
    cr_assert_eq(a.act, SHAPE_ACT_SLOW);
    cr_assert_eq(a.factor, 250);
    shape_backoff_match(r, -1, "554 5.7.1 Policy Block here", SHAPE_K_REPLY,
        NULL, &a);
    cr_assert_eq(a.act, SHAPE_ACT_BOUNCE);
    shape_backoff_match(r, -1, "454 policy block", SHAPE_K_REPLY, NULL, &a);
    cr_assert_eq(a.act, SHAPE_ACT_NONE);
    shape_backoff_match(r, -1, "connect to x[1.2.3.4]:25: refused",
        shape_kind_of("connect to x[1.2.3.4]:25: refused"), NULL, &a);
    cr_assert_eq(a.act, SHAPE_ACT_SUSPEND);
    cr_assert_eq(a.for_ms, 30000);
    shape_rules_free(r);
    /* no back-off rules at all: the built-in defaults */
    r = parse("shaping:\n  defaults: {connections: 3}\n");
    shape_backoff_match(r, -1, "421 4.7.0 [TSS04] Messages from 1.2.3.4 "
        "temporarily deferred", SHAPE_K_REPLY, NULL, &a);
    cr_assert_eq(a.act, SHAPE_ACT_SUSPEND);
    shape_backoff_match(r, -1, "421 Too many connections", SHAPE_K_REPLY,
        NULL, &a);
    cr_assert_eq(a.act, SHAPE_ACT_SLOW);
    shape_backoff_match(r, -1, "450 4.2.1 mailbox busy", SHAPE_K_REPLY,
        "rate_limited", &a);
    cr_assert_eq(a.act, SHAPE_ACT_NONE);
    shape_rules_free(r);
    /* a class */
    r = parse("shaping:\n  backoff:\n    - class: rate_limited\n"
        "      action: suspend\n");
    shape_backoff_match(r, -1, "450 4.2.1 busy", SHAPE_K_REPLY,
        "rate_limited", &a);
    cr_assert_eq(a.act, SHAPE_ACT_SUSPEND);
    shape_backoff_match(r, -1, "450 4.2.1 busy", SHAPE_K_REPLY, NULL, &a);
    cr_assert_eq(a.act, SHAPE_ACT_NONE);
    shape_rules_free(r);
}

Test(shape, errors_name_line_and_column)
{
    struct shape_rules *r = (struct shape_rules *)1;
    char                err[256];

    parse_fails("shaping:\n  defaults:\n    conections: 3\n",
        "relay.yaml:3:5: unknown key conections");
    parse_fails("shaping:\n  sites:\n    - name: g\n      mx: [a]\n"
        "      deliveries_per_minute: lots\n", "relay.yaml:5:30:");
    parse_fails("shaping:\n  backoff:\n    - text: '(('\n"
        "      action: slow\n", "relay.yaml:3:13: text: bad regular");
    parse_fails("shaping:\n  backoff:\n    - code: 421\n",
        "relay.yaml:3:7: backoff: a rule needs action");
    parse_fails("shaping:\n  backoff:\n    - action: slow\n"
        "      factor: 2\n", "relay.yaml:4:15: factor");
    parse_fails("shaping:\n  sites:\n    - connections: 1\n",
        "relay.yaml:3:7: sites: a block matches nothing");
    parse_fails("shaping: [\n", "relay.yaml:");
    /* no shaping: section: off */
    cr_assert_eq(shape_rules_parse("relay.yaml", "hostname: x\n", 12, &r,
        err, sizeof(err)), 0);
    cr_assert_null(r);
}

Test(shape, rules_file_errors_and_merge)
{
    char                dir[] = "/tmp/shape-unit-XXXXXX", path[128];
    char                rf[128], err[512];
    FILE               *f;
    struct shape_rules *r = NULL;
    struct shape_limits l;
    char                site[SHAPE_NAME_MAX];

    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/relay.yaml", dir);
    snprintf(rf, sizeof(rf), "%s/shaping.yaml", dir);
    f = fopen(path, "w");
    fprintf(f, "shaping:\n  rules_file: shaping.yaml\n  defaults:\n"
        "    connections: 9\n    burst: 1\n");
    fclose(f);
    f = fopen(rf, "w");
    fprintf(f, "defaults:\n  connections: 4\nsites:\n  - name: s\n"
        "    domains: [d.test]\n    burst: 7\n");
    fclose(f);
    cr_assert_eq(shape_rules_load(path, &r, err, sizeof(err)), 0, "%s", err);
    shape_limits_of(r, shape_site(r, "d.test", NULL, 0, site), "default",
        &l);
    cr_assert_str_eq(site, "s");
    cr_assert_eq(l.connections, 4);
    cr_assert_eq(l.burst, 7);
    shape_limits_of(r, -1, "default", &l);
    cr_assert_eq(l.burst, 1);
    shape_rules_free(r);
    f = fopen(rf, "w");
    fprintf(f, "sites:\n  - name: s\n    domains: [d.test]\n"
        "    connections: -1\n");
    fclose(f);
    cr_assert_eq(shape_rules_load(path, &r, err, sizeof(err)), -1);
    cr_assert(strstr(err, "shaping.yaml:4:18: connections") != NULL, "%s",
        err);
    unlink(rf);
    cr_assert_eq(shape_rules_load(path, &r, err, sizeof(err)), -1);
    cr_assert(strstr(err, "relay.yaml:2:15: shaping.rules_file") != NULL,
        "%s", err);
    unlink(path);
    rmdir(dir);
}

Test(shape, table_connections_node_wide)
{
    struct shape_table *t = shape_table_create();
    int                 e, e2;

    cr_assert_not_null(t);
    e = shape_entry(t, "google", "default");
    cr_assert_geq(e, 0);
    cr_assert_eq(shape_entry(t, "google", "default"), e);
    cr_assert_eq(shape_entry_find(t, "yahoo", "default"), -1);
    e2 = shape_entry(t, "google", "b");
    cr_assert_neq(e2, e);
    /* two workers, a limit of 3 together */
    cr_assert_eq(shape_conn_take(t, e, 1, 3), 0);
    cr_assert_eq(shape_conn_take(t, e, 2, 3), 0);
    cr_assert_eq(shape_conn_take(t, e, 2, 3), 0);
    cr_assert_eq(shape_conn_take(t, e, 1, 3), -1);
    cr_assert_eq(shape_conns(t, e), 3);
    /* worker 2 dies: its two go */
    shape_slot_clear(t, 2);
    cr_assert_eq(shape_conns(t, e), 1);
    shape_conn_give(t, e, 2);           /* a late give changes nothing */
    cr_assert_eq(shape_conns(t, e), 1);
    shape_conn_give(t, e, 1);
    cr_assert_eq(shape_conns(t, e), 0);
}

Test(shape, table_rates_and_episodes)
{
    struct shape_table *t = shape_table_create();
    struct shape_limits l;
    struct shape_action a;
    struct shape_view   v;
    uint64_t            nb, now = 1000000000, wall = 5000000;
    int                 e = shape_entry(t, "s", "default"), i;

    memset(&l, 0, sizeof(l));
    l.rate[SHAPE_R_SEC].n = 10;
    l.rate[SHAPE_R_SEC].per_ms = 1000;
    l.rate[SHAPE_R_MIN].n = 12;
    l.rate[SHAPE_R_MIN].per_ms = 60000;
    l.burst = 1;
    cr_assert_eq(shape_may(t, e, &l, SHAPE_R_SEC, 1, now, wall, &nb), 0);
    cr_assert_eq(shape_may(t, e, &l, SHAPE_R_SEC, 1, now, wall, &nb), 0);
    cr_assert_eq(shape_may(t, e, &l, SHAPE_R_SEC, 1, now, wall, &nb), -1);
    cr_assert_eq(nb, now + 100000);
    /* the minute rate binds after a while; the second's is refunded */
    for (i = 0; i < 30; i++)
        (void)shape_may(t, e, &l, SHAPE_R_SEC, 1, now + 200000 * (i + 1),
            wall, &nb);
    cr_assert_eq(shape_may(t, e, &l, SHAPE_R_SEC, 0, now + 6400000, wall,
        &nb), -1);
    cr_assert_gt(nb, now + 6400000 + 1000000);
    /* a suspension, and its end in the tick */
    memset(&a, 0, sizeof(a));
    a.act = SHAPE_ACT_SUSPEND;
    a.for_ms = 2000;
    cr_assert_eq(shape_backoff(t, e, &a, "421 4.7.0 [TSS04]\r\nx", wall, 0),
        1);
    cr_assert_eq(shape_backoff(t, e, &a, "421 again", wall, 0), 0);
    cr_assert(shape_suspended(t, e, wall + 1999));
    cr_assert(!shape_suspended(t, e, wall + 2000));
    cr_assert_eq(shape_table_list(t, wall, &v, 1), 1);
    cr_assert_eq(v.mode, SHAPE_M_SUSPEND);
    cr_assert(strchr(v.reply, '\r') == NULL, "%s", v.reply);
    cr_assert_eq(shape_resume(t, e), 1);
    cr_assert(!shape_suspended(t, e, wall));
    /* slow: a stricter factor replaces, a milder one does not */
    a.act = SHAPE_ACT_SLOW;
    a.factor = 500;
    a.for_ms = 1000;
    a.steps = 1;
    a.step_ms = 1000;
    cr_assert_eq(shape_backoff(t, e, &a, "421 4.7.28", wall, 0), 1);
    a.factor = 700;
    cr_assert_eq(shape_backoff(t, e, &a, "421 4.7.28", wall, 0), 0);
    a.factor = 200;
    cr_assert_eq(shape_backoff(t, e, &a, "421 4.7.28", wall, 0), 1);
}

Test(shape, kinds_of_own_reasons)
{
    cr_assert_eq(shape_kind_of("connect to mx[1.2.3.4]:25: Connection "
        "refused"), SHAPE_K_CONNECT);
    cr_assert_eq(shape_kind_of("connect to mx[1.2.3.4]:25: Connection "
        "timed out"), SHAPE_K_TIMEOUT);
    cr_assert_eq(shape_kind_of("451 4.4.3 host name x was not resolved"),
        SHAPE_K_DNS);
    cr_assert_eq(shape_kind_of("lost connection with x while sending EHLO"),
        SHAPE_K_CONNECT);
    cr_assert_eq(shape_kind_of("421 4.7.28 rate"), SHAPE_K_REPLY);
    /* a hop that next-hop health skips: what it did last */
    cr_assert_eq(shape_kind_of("next hop mx[1.2.3.4]:25 is marked down "
        "(connect to mx[1.2.3.4]:25: Connection refused)"), SHAPE_K_CONNECT);
    cr_assert_eq(shape_kind_of("next hop mx[1.2.3.4]:25 is marked down "
        "(conversation with mx timed out while receiving the initial "
        "server greeting)"), SHAPE_K_TIMEOUT);
    cr_assert_str_eq(shape_kind_name(SHAPE_K_TLS), "tls");
    cr_assert_str_eq(shape_act_name(SHAPE_ACT_BOUNCE), "bounce");
}

Test(shape, site_backoff_first)
{
    struct shape_rules *r = parse("shaping:\n  sites:\n    - name: y\n"
        "      mx: [.yahoodns.net]\n      backoff:\n"
        "        - code: 4xx\n          action: suspend\n          for: 1h\n"
        "  backoff:\n    - code: 421\n      action: slow\n");
    struct shape_action a;
    char                site[SHAPE_NAME_MAX];
    int                 b = shape_site(r, "yahoo.com",
        (const char *[]){ "mta5.am0.yahoodns.net" }, 1, site);

    cr_assert_str_eq(site, "y");
    shape_backoff_match(r, b, "421 4.7.0 [TSS04]", SHAPE_K_REPLY, NULL, &a);
    cr_assert_eq(a.act, SHAPE_ACT_SUSPEND);
    cr_assert_eq(a.for_ms, 3600000);
    shape_backoff_match(r, -1, "421 4.7.0 [TSS04]", SHAPE_K_REPLY, NULL, &a);
    cr_assert_eq(a.act, SHAPE_ACT_SLOW);
    shape_rules_free(r);
}

Test(shape, site_seen_by_domain)
{
    struct shape_table *t = shape_table_create();
    struct shape_limits l;
    char                site[SHAPE_NAME_MAX];
    int                 e = shape_entry(t, "l.google.com", "default");

    memset(&l, 0, sizeof(l));
    shape_entry_set(t, e, &l, "googlemail.com");
    cr_assert_str_eq(shape_site_seen(t, "GoogleMail.com", site),
        "l.google.com");
    cr_assert_null(shape_site_seen(t, "yahoo.com", site));
}
