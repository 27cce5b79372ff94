/*
 * test_config.c - config_load() on a file with every key, on a file with
 * only the required key (every default), and on one bad file per kind of
 * error, checking the exact message text with file:line:col.
 *
 * Each test writes its YAML into its own mkdtemp() directory and removes
 * it afterwards; no fixture files are shipped.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <criterion/criterion.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "bclass/bclass.h"
#include "common/log.h"
#include "common/util.h"
#include "router/route.h"
#include "dkim/dkim.h"
#include "config/config.h"
#include "tests/unit/t_fs.h"

static char tdir[64];
static int  tdir_made;                  /* mkdtemp() made tdir */
static char tpath[128];                 /* tdir/relay.yaml */
static char terr[8192];

static void
tc_setup(void)
{
    util_strlcpy(tdir, "/tmp/mtad-test-config-XXXXXX", sizeof(tdir));
    cr_assert_not_null(mkdtemp(tdir), "mkdtemp: %s", strerror(errno));
    tdir_made = 1;
    snprintf(tpath, sizeof(tpath), "%s/relay.yaml", tdir);
}

/* tc_teardown - tdir and whatever a test made in it (a list of names
 * here missed the ones added later: a directory was left per run). */
static void
tc_teardown(void)
{
    if (tdir_made)
        t_rm_tree(tdir);
}

TestSuite(config, .init = tc_setup, .fini = tc_teardown);

static void
tc_write(const char *text)
{
    FILE *fp = fopen(tpath, "w");

    cr_assert_not_null(fp, "fopen %s: %s", tpath, strerror(errno));
    cr_assert_eq(fputs(text, fp) >= 0, 1);
    cr_assert_eq(fclose(fp), 0);
}

static struct config *
tc_load_ok(const char *text)
{
    struct config *cfg;

    tc_write(text);
    cfg = config_load(tpath, terr, sizeof(terr));
    cr_assert_not_null(cfg, "config_load failed: %s", terr);
    return cfg;
}

/* Load text, expect failure, and compare the whole error text to
 * "<path>:" + expect (expect may hold several lines, each starting with
 * "%P" where the path goes). */
static void
tc_load_bad(const char *text, const char *expect)
{
    char want[8192];
    size_t o = 0;
    const char *e;

    tc_write(text);
    cr_assert_null(config_load(tpath, terr, sizeof(terr)),
        "config_load accepted a bad file");
    for (e = expect; *e != '\0' && o + sizeof(tpath) < sizeof(want); e++) {
        if (e[0] == '%' && e[1] == 'P') {
            o += util_strlcpy(want + o, tpath, sizeof(want) - o);
            e++;
        } else
            want[o++] = *e;
    }
    want[o] = '\0';
    cr_assert_str_eq(terr, want);
}

static const char good_yaml[] =
    "# every key, none at its default\n"
    "server:\n"
    "  hostname: mx1.example.net\n"
    "  listen: [\"127.0.0.1:2525\", \"[::1]:2526\", \"*:2527\"]\n"
    "  workers: 3\n"
    "  user: mail\n"
    "  group: daemon\n"
    "  pid_file: /tmp/x/mtad.pid\n"
    "  control_socket: ./var/control.sock\n"
    "  shutdown_timeout: 45s\n"
    "  admin_group: mtadadm\n"
    "  sandbox: off\n"
    "limits:\n"
    "  max_message_size: 20M\n"
    "  max_recipients: 500\n"
    "  max_connections: 2000\n"
    "  max_connections_per_ip: 7\n"
    "  command_timeout: 2m\n"
    "  data_timeout: 1h\n"
    "  max_errors: 9\n"
    "  bare_newline: accept\n"
    "relay:\n"
    "  allow_networks:\n"
    "    - 10.0.0.0/8\n"
    "    - \"2001:db8::/32\"\n"
    "    - 192.168.1.7\n"
    "spool:\n"
    "  dir: /dev/shm/spool\n"
    "  fsync: true\n"
    "routes:\n"
    "  db: ./var/routes.mdb\n"
    "  default: \"smtp:[smarthost.example.net]:25\"\n"
    "  static:\n"
    "    Example.ORG: \"maildir:/var/mail/example\"\n"
    "    .example.net: discard\n"
    "    postmaster@example.com: \"smtp:[10.0.0.1]:2525\"\n"
    "delivery:\n"
    "  retry: [30s, 2m, 1h]\n"
    "  max_queue_time: 2d\n"
    "  delay_warning: 30m\n"
    "  connections_per_destination: 4\n"
    "  connect_timeout: 1500ms\n"
    "log:\n"
    "  file: /var/log/mtad.log\n"
    "  level: debug\n"
    "  flush_interval: 250ms\n";

Test(config, every_key)
{
    struct config *c = tc_load_ok(good_yaml);
    const struct sockaddr_in *sin;
    const struct sockaddr_in6 *sin6;
    char ip[64];

    cr_assert_str_eq(c->path, tpath);
    cr_assert_str_eq(c->hostname, "mx1.example.net");
    cr_assert_eq(c->nlisten, 3);
    cr_assert_str_eq(c->listen[0].spec, "127.0.0.1:2525");
    sin = (const struct sockaddr_in *)&c->listen[0].addr;
    cr_assert_eq(sin->sin_family, AF_INET);
    cr_assert_eq(ntohs(sin->sin_port), 2525);
    cr_assert_eq(c->listen[0].addrlen, sizeof(struct sockaddr_in));
    cr_assert_str_eq(util_sockaddr_ip((const struct sockaddr *)sin, ip,
        sizeof(ip)), "127.0.0.1");
    sin6 = (const struct sockaddr_in6 *)&c->listen[1].addr;
    cr_assert_eq(sin6->sin6_family, AF_INET6);
    cr_assert_eq(ntohs(sin6->sin6_port), 2526);
    cr_assert_eq(c->listen[1].addrlen, sizeof(struct sockaddr_in6));
    cr_assert_str_eq(c->listen[2].spec, "*:2527");
    sin = (const struct sockaddr_in *)&c->listen[2].addr;
    cr_assert_eq(sin->sin_addr.s_addr, htonl(INADDR_ANY));
    cr_assert_eq(c->workers, 3);
    cr_assert_str_eq(c->user, "mail");
    cr_assert_str_eq(c->group, "daemon");
    cr_assert_str_eq(c->pid_file, "/tmp/x/mtad.pid");
    cr_assert_str_eq(c->control_socket, "./var/control.sock");
    cr_assert_eq(c->shutdown_timeout_ms, 45000);
    cr_assert_str_eq(c->admin_group, "mtadadm");
    cr_assert_eq(c->sandbox, false);

    cr_assert_eq(c->max_message_size, 20ull * 1024 * 1024);
    cr_assert_eq(c->max_recipients, 500);
    cr_assert_eq(c->max_connections, 2000);
    cr_assert_eq(c->max_connections_per_ip, 7);
    cr_assert_eq(c->command_timeout_ms, 120000);
    cr_assert_eq(c->data_timeout_ms, 3600000);
    cr_assert_eq(c->max_errors, 9);
    cr_assert_eq(c->bare_newline_accept, true);

    cr_assert_eq(c->nallow_networks, 3);
    cr_assert_eq(c->allow_networks[0].family, AF_INET);
    cr_assert_eq(c->allow_networks[0].prefix, 8);
    cr_assert_eq(c->allow_networks[0].addr[0], 10);
    cr_assert_eq(c->allow_networks[1].family, AF_INET6);
    cr_assert_eq(c->allow_networks[1].prefix, 32);
    cr_assert_eq(c->allow_networks[1].addr[0], 0x20);
    cr_assert_eq(c->allow_networks[1].addr[1], 0x01);
    cr_assert_eq(c->allow_networks[2].prefix, 32);
    cr_assert_eq(c->allow_networks[2].addr[3], 7);

    cr_assert_str_eq(c->spool_dir, "/dev/shm/spool");
    cr_assert_eq(c->spool_fsync, true);

    cr_assert_str_eq(c->routes_db, "./var/routes.mdb");
    cr_assert_str_eq(c->routes_default, "smtp:[smarthost.example.net]:25");
    cr_assert_eq(c->nstatic_routes, 3);
    cr_assert_str_eq(c->static_routes[0].key, "example.org");
    cr_assert_str_eq(c->static_routes[0].route, "maildir:/var/mail/example");
    cr_assert_eq(c->static_routes[0].line, 34);
    cr_assert_eq(c->static_routes[0].col, 5);
    cr_assert_str_eq(c->static_routes[1].key, ".example.net");
    cr_assert_str_eq(c->static_routes[1].route, "discard");
    cr_assert_eq(c->static_routes[1].line, 35);
    cr_assert_str_eq(c->static_routes[2].key, "postmaster@example.com");
    cr_assert_str_eq(c->static_routes[2].route, "smtp:[10.0.0.1]:2525");

    cr_assert_eq(c->nretry, 3);
    cr_assert_eq(c->retry_ms[0], 30000);
    cr_assert_eq(c->retry_ms[1], 120000);
    cr_assert_eq(c->retry_ms[2], 3600000);
    cr_assert_eq(c->max_queue_time_ms, 2ull * 86400 * 1000);
    cr_assert_eq(c->delay_warning_ms, 30ull * 60 * 1000);
    cr_assert_eq(c->connections_per_destination, 4);
    cr_assert_eq(c->connect_timeout_ms, 1500);

    cr_assert_str_eq(c->log_file, "/var/log/mtad.log");
    cr_assert_eq(c->log_level, LOGL_DEBUG);
    cr_assert_eq(c->log_flush_interval_ms, 250);
    config_free(c);
}

static int
tc_ncpu(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);

    return n < 1 ? 1 : n > 128 ? 128 : (int)n;
}

Test(config, defaults)
{
    struct config *c = tc_load_ok("routes:\n  default: discard\n");
    char host[256] = "";
    const struct sockaddr_in *sin;
    struct sockaddr_in v4;
    struct sockaddr_in6 v6;

    cr_assert_eq(gethostname(host, sizeof(host) - 1), 0);
    cr_assert_str_eq(c->hostname, host);
    cr_assert_eq(c->nlisten, 1);
    cr_assert_str_eq(c->listen[0].spec, "127.0.0.1:2525");
    sin = (const struct sockaddr_in *)&c->listen[0].addr;
    cr_assert_eq(sin->sin_family, AF_INET);
    cr_assert_eq(ntohs(sin->sin_port), 2525);
    cr_assert_eq(sin->sin_addr.s_addr, htonl(INADDR_LOOPBACK));
    cr_assert_eq(c->workers, tc_ncpu());
    cr_assert_str_eq(c->user, "mtad");
    cr_assert_str_eq(c->group, "mtad");
    cr_assert_str_eq(c->pid_file, "/run/mtad/mtad.pid");
    cr_assert_str_eq(c->control_socket, "/run/mtad/control.sock");
    cr_assert_eq(c->shutdown_timeout_ms, 30000);
    cr_assert_null(c->admin_group);
    cr_assert_eq(c->sandbox, true);

    cr_assert_eq(c->max_message_size, 50ull * 1024 * 1024);
    cr_assert_eq(c->max_recipients, 1000);
    cr_assert_eq(c->max_connections, 10000);
    cr_assert_eq(c->max_connections_per_ip, 100);
    cr_assert_eq(c->command_timeout_ms, 300000);
    cr_assert_eq(c->data_timeout_ms, 600000);
    cr_assert_eq(c->max_errors, 20);
    cr_assert_eq(c->bare_newline_accept, false);

    /* 127.0.0.0/8 and ::1/128: check by matching addresses. */
    cr_assert_eq(c->nallow_networks, 2);
    memset(&v4, 0, sizeof(v4));
    v4.sin_family = AF_INET;
    inet_pton(AF_INET, "127.9.8.7", &v4.sin_addr);
    cr_assert(util_cidr_match(&c->allow_networks[0],
        (struct sockaddr *)&v4));
    cr_assert_eq(c->allow_networks[0].prefix, 8);
    memset(&v6, 0, sizeof(v6));
    v6.sin6_family = AF_INET6;
    inet_pton(AF_INET6, "::1", &v6.sin6_addr);
    cr_assert(util_cidr_match(&c->allow_networks[1],
        (struct sockaddr *)&v6));
    cr_assert_eq(c->allow_networks[1].prefix, 128);

    cr_assert_str_eq(c->spool_dir, "/run/mtad/spool");
    cr_assert_eq(c->spool_fsync, false);
    cr_assert_str_eq(c->routes_db, "/var/lib/mtad/routes.mdb");
    cr_assert_str_eq(c->routes_default, "discard");
    cr_assert_eq(c->nstatic_routes, 0);

    cr_assert_eq(c->nretry, 5);
    cr_assert_eq(c->retry_ms[0], 60000);
    cr_assert_eq(c->retry_ms[1], 300000);
    cr_assert_eq(c->retry_ms[2], 900000);
    cr_assert_eq(c->retry_ms[3], 3600000);
    cr_assert_eq(c->retry_ms[4], 14400000);
    cr_assert_eq(c->max_queue_time_ms, 5ull * 86400 * 1000);
    cr_assert_eq(c->delay_warning_ms, 4ull * 3600 * 1000);
    cr_assert_eq(c->connections_per_destination, 20);
    cr_assert_eq(c->connect_timeout_ms, 30000);
    cr_assert_eq(c->spool_reserve, 4 * 1024 * 1024);
    cr_assert_eq(c->mta_timeouts.greeting_ms, 300000);
    cr_assert_eq(c->mta_timeouts.helo_ms, 300000);
    cr_assert_eq(c->mta_timeouts.mail_ms, 300000);
    cr_assert_eq(c->mta_timeouts.rcpt_ms, 300000);
    cr_assert_eq(c->mta_timeouts.data_ms, 120000);
    cr_assert_eq(c->mta_timeouts.data_xfer_ms, 180000);
    cr_assert_eq(c->mta_timeouts.data_done_ms, 600000);
    cr_assert_eq(c->mta_timeouts.quit_ms, 300000);

    cr_assert_str_eq(c->log_file, "-");
    cr_assert_eq(c->log_level, LOGL_INFO);
    cr_assert_eq(c->log_flush_interval_ms, 100);
    config_free(c);
}

Test(config, workers_auto_and_empty_sections)
{
    struct config *c = tc_load_ok("server:\n  workers: auto\nlimits:\n"
        "routes:\n  default: discard\n  static:\n");

    cr_assert_eq(c->workers, tc_ncpu());
    cr_assert_eq(c->max_recipients, 1000);
    cr_assert_eq(c->nstatic_routes, 0);
    config_free(c);
}

Test(config, booleans_and_levels)
{
    static const struct { const char *word; bool v; } b[] = {
        { "true", true }, { "yes", true }, { "on", true },
        { "false", false }, { "no", false }, { "off", false },
        { "True", true }, { "OFF", false },
    };
    static const struct { const char *word; int v; } l[] = {
        { "err", LOGL_ERR }, { "warn", LOGL_WARN },
        { "notice", LOGL_NOTICE }, { "info", LOGL_INFO },
        { "debug", LOGL_DEBUG },
    };
    char text[256];
    size_t i;

    for (i = 0; i < ARRAY_LEN(b); i++) {
        struct config *c;

        snprintf(text, sizeof(text), "spool:\n  fsync: %s\nlimits:\n"
            "  bare_newline: reject\nroutes:\n  default: discard\n",
            b[i].word);
        c = tc_load_ok(text);
        cr_assert_eq(c->spool_fsync, b[i].v, "fsync: %s", b[i].word);
        cr_assert_eq(c->bare_newline_accept, false);
        config_free(c);
    }
    for (i = 0; i < ARRAY_LEN(l); i++) {
        struct config *c;

        snprintf(text, sizeof(text), "log:\n  level: %s\nroutes:\n"
            "  default: discard\n", l[i].word);
        c = tc_load_ok(text);
        cr_assert_eq(c->log_level, l[i].v, "level: %s", l[i].word);
        config_free(c);
    }
}

Test(config, unknown_key_top)
{
    tc_load_bad("routes:\n  default: discard\nfoo: 1\n",
        "%P:3:1: foo: unknown key 'foo' (expected one of: server, limits, "
        "screen, greylist, quotas, relay, spool, routes, delivery, "
        "egress, log, tls, dns, dkim, metrics, tlsrpt, auth, events, "
        "submission, cluster, shaping)");
}

Test(config, unknown_key_nested)
{
    tc_load_bad("server:\n  hostname: mx.example.org\n  listn: []\n"
        "routes:\n  default: discard\n",
        "%P:3:3: server.listn: unknown key 'listn' (expected one of: "
        "hostname, listen, workers, user, group, pid_file, control_socket, "
        "shutdown_timeout, admin_group, sandbox)");
}

/* delivery.timeouts and spool.reserve */
Test(config, delivery_timeouts)
{
    struct config *c = tc_load_ok("routes:\n  default: discard\n"
        "spool:\n  reserve: 1M\n"
        "delivery:\n  timeouts:\n    greeting: 7s\n    helo: 8s\n"
        "    mail: 9s\n    rcpt: 10s\n    data: 11s\n    data_xfer: 12s\n"
        "    data_done: 13s\n    quit: 14s\n");

    cr_assert_eq(c->spool_reserve, 1024 * 1024);
    cr_assert_eq(c->mta_timeouts.greeting_ms, 7000);
    cr_assert_eq(c->mta_timeouts.helo_ms, 8000);
    cr_assert_eq(c->mta_timeouts.mail_ms, 9000);
    cr_assert_eq(c->mta_timeouts.rcpt_ms, 10000);
    cr_assert_eq(c->mta_timeouts.data_ms, 11000);
    cr_assert_eq(c->mta_timeouts.data_xfer_ms, 12000);
    cr_assert_eq(c->mta_timeouts.data_done_ms, 13000);
    cr_assert_eq(c->mta_timeouts.quit_ms, 14000);
    config_free(c);
}

Test(config, delivery_timeouts_bad)
{
    tc_load_bad("routes:\n  default: discard\n"
        "delivery:\n  timeouts:\n    data_done: 0s\n    stall: 1s\n",
        "%P:5:16: delivery.timeouts.data_done: expected a duration greater "
        "than 0, got '0s'\n"
        "%P:6:5: delivery.timeouts.stall: unknown key 'stall' (expected one "
        "of: greeting, helo, mail, rcpt, data, data_xfer, data_done, quit)");
}

/* delivery.bounce_classes (bclass/bclass.h): loaded with the config; a
 * bad file is the config's error, named at the key and in the file */
Test(config, delivery_bounce_classes)
{
    char           rules[200], yaml[400], want[600];
    struct config *c = tc_load_ok("routes:\n  default: discard\n");
    FILE          *fp;

    cr_assert_null(c->bounce_classes);
    cr_assert_not_null(c->bclass, "the built-in rules alone");
    cr_assert_eq(bclass_of(c->bclass, "550 5.1.1 no such user"),
        BCLASS_INVALID_RECIPIENT);
    config_free(c);

    snprintf(rules, sizeof(rules), "%s/classes.conf", tdir);
    fp = fopen(rules, "w");
    cr_assert_not_null(fp);
    fputs("# ours\npolicy code=550 enh=5.1.1\n", fp);
    fclose(fp);
    snprintf(yaml, sizeof(yaml), "routes:\n  default: discard\n"
        "delivery:\n  bounce_classes: %s\n", rules);
    c = tc_load_ok(yaml);
    cr_assert_str_eq(c->bounce_classes, rules);
    cr_assert_eq(bclass_of(c->bclass, "550 5.1.1 no such user"),
        BCLASS_POLICY);
    config_free(c);

    fp = fopen(rules, "w");
    cr_assert_not_null(fp);
    fputs("# ours\npolicy code=550 enh=5.1.1\n mailbox_ful enh=4.2.2\n", fp);
    fclose(fp);
    snprintf(want, sizeof(want), "%%P:4:19: delivery.bounce_classes: %s:3:2: "
        "unknown class mailbox_ful (expected one of: invalid_recipient, "
        "bad_domain, mailbox_full, spam_block, policy, rate_limited, "
        "content, protocol, dns_failure, tls_failure, no_answer, other)",
        rules);
    tc_load_bad(yaml, want);
    unlink(rules);
}

/* delivery.mta_sts (RFC 8461; tlspol/sts.c) */
Test(config, delivery_mta_sts)
{
    struct config *c = tc_load_ok("routes:\n  default: discard\n");

    cr_assert_eq(c->mta_sts.enabled, 1);
    cr_assert_eq(c->mta_sts.fetch_timeout_ms, 10000);
    cr_assert_eq(c->mta_sts.port, 443);
    config_free(c);
    c = tc_load_ok("routes:\n  default: discard\ndelivery:\n  mta_sts:\n"
        "    enabled: false\n    fetch_timeout: 3s\n    port: 8443\n");
    cr_assert_eq(c->mta_sts.enabled, 0);
    cr_assert_eq(c->mta_sts.fetch_timeout_ms, 3000);
    cr_assert_eq(c->mta_sts.port, 8443);
    config_free(c);
    tc_load_bad("routes:\n  default: discard\ndelivery:\n  mta_sts:\n"
        "    port: 70000\n    max_age: 1d\n",
        "%P:5:11: delivery.mta_sts.port: expected an integer from 1 to "
        "65535, got '70000'\n"
        "%P:6:5: delivery.mta_sts.max_age: unknown key 'max_age' (expected "
        "one of: enabled, fetch_timeout, port)");
}

Test(config, wrong_type)
{
    tc_load_bad("server:\n  listen: 127.0.0.1:25\n"
        "routes:\n  default: discard\nspool: [a, b]\n"
        "limits:\n  max_recipients: {a: 1}\n",
        "%P:2:11: server.listen: expected a sequence of host:port like "
        "[\"127.0.0.1:2525\"], got '127.0.0.1:25'\n"
        "%P:5:8: spool: expected a mapping of keys (dir, fsync, reserve), got a "
        "sequence\n"
        "%P:7:19: limits.max_recipients: expected an integer from 1 to "
        "2147483647, got a mapping");
}

Test(config, empty_value)
{
    tc_load_bad("routes:\n  default: discard\n  db:\n",
        "%P:3:6: routes.db: expected a non-empty string, got an empty "
        "value");
}

/* An empty required key is one problem, not also "missing". */
Test(config, empty_default)
{
    tc_load_bad("routes:\n  default:\n",
        "%P:2:11: routes.default: expected a route like \"smtp:[host]:25\" "
        "or \"maildir:/path\", got an empty value");
}

/* Control characters never split a message over two lines. */
Test(config, control_characters_in_key)
{
    tc_load_bad("routes:\n  default: discard\n\"a\\nb\": 1\n",
        "%P:3:1: a?b: unknown key 'a?b' (expected one of: server, limits, "
        "screen, greylist, quotas, relay, spool, routes, delivery, "
        "egress, log, tls, dns, dkim, metrics, tlsrpt, auth, events, "
        "submission, cluster, shaping)");
}

Test(config, bad_size)
{
    tc_load_bad("routes:\n  default: discard\nlimits:\n"
        "  max_message_size: 5X\n",
        "%P:4:21: limits.max_message_size: expected a size like 50M "
        "(units K, M, G), got '5X'");
}

Test(config, bad_duration)
{
    tc_load_bad("routes:\n  default: discard\ndelivery:\n"
        "  connect_timeout: 30 s\n  retry: [1m, 5x, 0s]\n",
        "%P:4:20: delivery.connect_timeout: expected a duration like 30s, "
        "5m, 1h (units ms, s, m, h, d), got '30 s'\n"
        "%P:5:15: delivery.retry[1]: expected a duration like 30s, 5m, 1h "
        "(units ms, s, m, h, d), got '5x'\n"
        "%P:5:19: delivery.retry[2]: expected a duration greater than 0, "
        "got '0s'");
}

Test(config, empty_retry)
{
    tc_load_bad("routes:\n  default: discard\ndelivery:\n  retry: []\n",
        "%P:4:10: delivery.retry: expected at least one duration, got an "
        "empty sequence");
}

Test(config, bad_cidr_v4)
{
    tc_load_bad("routes:\n  default: discard\nrelay:\n"
        "  allow_networks: [10.0.0.0/8, 10.0.0.0/33, 10.0.0/8]\n",
        "%P:4:32: relay.allow_networks[1]: expected a network like "
        "10.0.0.0/8 or 2001:db8::/32, got '10.0.0.0/33'\n"
        "%P:4:45: relay.allow_networks[2]: expected a network like "
        "10.0.0.0/8 or 2001:db8::/32, got '10.0.0/8'");
}

Test(config, bad_cidr_v6)
{
    tc_load_bad("routes:\n  default: discard\nrelay:\n  allow_networks:\n"
        "    - \"::1/129\"\n    - \"2001:db8:::/32\"\n",
        "%P:5:7: relay.allow_networks[0]: expected a network like "
        "10.0.0.0/8 or 2001:db8::/32, got '::1/129'\n"
        "%P:6:7: relay.allow_networks[1]: expected a network like "
        "10.0.0.0/8 or 2001:db8::/32, got '2001:db8:::/32'");
}

Test(config, bad_listen)
{
    tc_load_bad("routes:\n  default: discard\nserver:\n"
        "  listen: [\"127.0.0.1:2525\", \"localhost:25\", \"::1:25\", "
        "\"127.0.0.1:70000\", \"127.0.0.1:2525\"]\n",
        "%P:4:30: server.listen[1]: expected host:port like "
        "127.0.0.1:2525, \"[::1]:25\" or \"*:25\", got 'localhost:25'\n"
        "%P:4:46: server.listen[2]: expected host:port like "
        "127.0.0.1:2525, \"[::1]:25\" or \"*:25\", got '::1:25'\n"
        "%P:4:56: server.listen[3]: expected host:port like "
        "127.0.0.1:2525, \"[::1]:25\" or \"*:25\", got '127.0.0.1:70000'\n"
        "%P:4:75: server.listen[4]: '127.0.0.1:2525' is listed twice "
        "(also server.listen[0])");
}

Test(config, empty_listen)
{
    tc_load_bad("routes:\n  default: discard\nserver:\n  listen: []\n",
        "%P:4:11: server.listen: expected at least one host:port, got an "
        "empty sequence");
}

Test(config, bad_route_value)
{
    char why[256] = "", want[1024];
    struct route r;

    cr_assert_eq(route_parse("smtpx:foo", &r, why, sizeof(why)), -1);
    cr_assert_neq(why[0], '\0');
    snprintf(want, sizeof(want),
        "%%P:2:12: routes.default: bad route 'smtpx:foo': %s\n"
        "%%P:4:18: routes.static.example.org: bad route 'smtpx:foo': %s",
        why, why);
    tc_load_bad("routes:\n  default: smtpx:foo\n  static:\n"
        "    example.org: smtpx:foo\n", want);
}

Test(config, bad_route_key)
{
    char why[256] = "", want[1024];

    cr_assert_eq(route_key_check("bad key!", why, sizeof(why)), -1);
    snprintf(want, sizeof(want),
        "%%P:4:5: routes.static: bad key 'bad key!': %s\n"
        "%%P:6:5: routes.static.EXAMPLE.org: duplicate key (first at "
        "line 5)", why);
    tc_load_bad("routes:\n  default: discard\n  static:\n"
        "    \"bad key!\": discard\n    example.org: discard\n"
        "    EXAMPLE.org: discard\n", want);
}

Test(config, missing_default)
{
    tc_load_bad("server:\n  workers: 2\nroutes:\n  db: /tmp/r.mdb\n",
        "%P:3:1: routes.default: required key is missing (the route for "
        "mail that matches no other key)");
}

Test(config, missing_default_no_routes)
{
    tc_load_bad("", "%P:1:1: routes.default: required key is missing (the "
        "route for mail that matches no other key)");
}

Test(config, missing_file)
{
    char want[256];

    snprintf(want, sizeof(want), "%s/nope.yaml", tdir);
    cr_assert_null(config_load(want, terr, sizeof(terr)));
    strncat(want, ": cannot open: No such file or directory",
        sizeof(want) - strlen(want) - 1);
    cr_assert_str_eq(terr, want);
}

Test(config, syntax_error)
{
    tc_load_bad("routes:\n  default: discard\n  db: a: b\n",
        "%P:3:8: syntax error: mapping values are not allowed in this "
        "context");
}

Test(config, syntax_error_context)
{
    tc_load_bad("server:\n  listen: [\"127.0.0.1:25\"\nroutes:\n",
        "%P:3:1: syntax error: did not find expected ',' or ']' while "
        "parsing a flow sequence at line 2 column 11");
}

Test(config, bad_workers)
{
    tc_load_bad("routes:\n  default: discard\nserver:\n  workers: 0\n",
        "%P:4:12: server.workers: expected auto or an integer from 1 to "
        "128, got '0'");
    tc_load_bad("routes:\n  default: discard\nserver:\n  workers: 129\n",
        "%P:4:12: server.workers: expected auto or an integer from 1 to "
        "128, got '129'");
}

Test(config, bad_log_level)
{
    tc_load_bad("routes:\n  default: discard\nlog:\n  level: loud\n",
        "%P:4:10: log.level: expected one of err, warn, notice, info, "
        "debug, got 'loud'");
}

Test(config, bad_bare_newline)
{
    tc_load_bad("routes:\n  default: discard\nlimits:\n"
        "  bare_newline: sometimes\n",
        "%P:4:17: limits.bare_newline: expected reject or accept, got "
        "'sometimes'");
}

Test(config, bad_bool_int_hostname)
{
    tc_load_bad("routes:\n  default: discard\nspool:\n  fsync: maybe\n"
        "limits:\n  max_errors: -1\nserver:\n  hostname: \"mx 1\"\n",
        "%P:4:10: spool.fsync: expected true or false, got 'maybe'\n"
        "%P:6:15: limits.max_errors: expected an integer from 1 to "
        "2147483647, got '-1'\n"
        "%P:8:13: server.hostname: expected a host name like "
        "mx1.example.net, got 'mx 1'");
}

Test(config, duplicate_key)
{
    tc_load_bad("routes:\n  default: discard\nlog:\n  level: info\n"
        "  level: debug\n",
        "%P:5:3: log.level: duplicate key (first at line 4)");
}

Test(config, top_level_not_mapping)
{
    tc_load_bad("- a\n- b\n",
        "%P:1:1: top level: expected a mapping of keys (server, limits, "
        "screen, greylist, quotas, relay, spool, routes, delivery, "
        "egress, log, tls, dns, dkim, metrics, tlsrpt, auth, events, "
        "submission, cluster, shaping), got a sequence");
}

Test(config, second_document)
{
    tc_load_bad("routes:\n  default: discard\n---\nlog:\n  level: info\n",
        "%P:3:1: top level: expected one YAML document, found a second "
        "one");
}

/* Every problem is reported, in file order, not just the first. */
Test(config, all_errors_collected)
{
    tc_load_bad("server:\n  workers: many\n  bogus: 1\nlimits:\n"
        "  max_message_size: 1T\nrouting: {}\n",
        "%P:2:12: server.workers: expected auto or an integer from 1 to "
        "128, got 'many'\n"
        "%P:3:3: server.bogus: unknown key 'bogus' (expected one of: "
        "hostname, listen, workers, user, group, pid_file, control_socket, "
        "shutdown_timeout, admin_group, sandbox)\n"
        "%P:5:21: limits.max_message_size: expected a size like 50M "
        "(units K, M, G), got '1T'\n"
        "%P:6:1: routing: unknown key 'routing' (expected one of: server, "
        "limits, screen, greylist, quotas, relay, spool, routes, "
        "delivery, egress, log, tls, dns, dkim, metrics, tlsrpt, auth, "
        "events, submission, cluster, shaping)\n"
        "%P:1:1: routes.default: required key is missing (the route for "
        "mail that matches no other key)");
}

/* A small err buffer still gets whole, terminated lines. */
Test(config, small_error_buffer)
{
    char small[250];
    const char *nl;

    tc_write("server:\n  workers: x\n  user: \"\"\n  group: \"\"\n"
        "routes:\n  default: discard\n");
    memset(small, 'Z', sizeof(small));
    cr_assert_null(config_load(tpath, small, sizeof(small)));
    cr_assert_lt(strlen(small), sizeof(small));
    nl = strrchr(small, '\n');
    cr_assert_not_null(nl, "got: %s", small);
    cr_assert_str_eq(nl + 1 + strlen(tpath), ": and 2 more errors",
        "got: %s", small);
}


/* --- tls ------------------------------------------------------------ */

/* tc_cert - a self-signed P-256 certificate tdir/NAME.crt and its key
 * tdir/NAME.key, made with the openssl command. */
static void
tc_cert(const char *name)
{
    char cmd[1024];

    snprintf(cmd, sizeof(cmd), "openssl req -x509 -newkey ec -pkeyopt "
        "ec_paramgen_curve:prime256v1 -nodes -keyout %s/%s.key -out "
        "%s/%s.crt -days 2 -subj /CN=mx.example.net >/dev/null 2>&1",
        tdir, name, tdir, name);
    cr_assert_eq(system(cmd), 0, "openssl req failed: %s", cmd);
}

/* Load "routes: default" plus tls_yaml (printf-style, %1$s = tdir) and
 * return the config or NULL with terr set. */
static struct config *
tc_tls_load(const char *tls_yaml)
{
    char text[2048], body[1536];

    snprintf(body, sizeof(body), tls_yaml, tdir, tdir, tdir, tdir);
    snprintf(text, sizeof(text), "routes:\n  default: discard\n%s", body);
    tc_write(text);
    return config_load(tpath, terr, sizeof(terr));
}

/* The expected error: "<tpath>:" + the formatted rest (%s = tdir). */
static void
tc_tls_bad(const char *tls_yaml, const char *expect_fmt)
{
    char want[2048], rest[1536];

    cr_assert_null(tc_tls_load(tls_yaml), "config_load accepted it");
    snprintf(rest, sizeof(rest), expect_fmt, tdir, tdir, tdir, tdir);
    snprintf(want, sizeof(want), "%s:%s", tpath, rest);
    cr_assert_str_eq(terr, want);
}

Test(config, tls_absent_by_default)
{
    struct config *c = tc_load_ok("routes:\n  default: discard\n");

    cr_assert_null(c->tls_cert_file);
    cr_assert_null(c->tls_key_file);
    cr_assert_null(c->tls_ciphers);
    cr_assert_eq(c->tls_min_version, CONFIG_TLS12);
    config_free(c);
}

Test(config, tls_every_key)
{
    struct config *c;
    char           want[256];

    tc_cert("a");
    c = tc_tls_load("tls:\n  cert_file: %s/a.crt\n  key_file: %s/a.key\n"
        "  min_version: TLSv1.3\n  ciphers: \"ECDHE+AESGCM:!aNULL\"\n");
    cr_assert_not_null(c, "config_load failed: %s", terr);
    snprintf(want, sizeof(want), "%s/a.crt", tdir);
    cr_assert_str_eq(c->tls_cert_file, want);
    snprintf(want, sizeof(want), "%s/a.key", tdir);
    cr_assert_str_eq(c->tls_key_file, want);
    cr_assert_eq(c->tls_min_version, CONFIG_TLS13);
    cr_assert_str_eq(c->tls_ciphers, "ECDHE+AESGCM:!aNULL");
    config_free(c);
    c = tc_tls_load("tls:\n  cert_file: %s/a.crt\n  key_file: %s/a.key\n"
        "  min_version: TLSv1.2\n");
    cr_assert_not_null(c, "config_load failed: %s", terr);
    cr_assert_eq(c->tls_min_version, CONFIG_TLS12);
    config_free(c);
}

Test(config, tls_cert_without_key)
{
    tc_cert("a");
    tc_tls_bad("tls:\n  cert_file: %s/a.crt\n",
        "4:14: tls.key_file: required when tls.cert_file is set");
    tc_tls_bad("tls:\n  min_version: TLSv1.3\n  key_file: %s/a.key\n",
        "5:13: tls.cert_file: required when tls.key_file is set");
}

Test(config, tls_missing_files)
{
    tc_tls_bad("tls:\n  cert_file: %s/none.crt\n  key_file: %s/none.key\n",
        "4:14: tls.cert_file: cannot read '%s/none.crt': No such file or "
        "directory\n%s/relay.yaml:5:13: tls.key_file: cannot read "
        "'%s/none.key': No such file or directory");
}

Test(config, tls_key_does_not_match)
{
    tc_cert("a");
    tc_cert("b");
    tc_tls_bad("tls:\n  cert_file: %s/a.crt\n  key_file: %s/b.key\n",
        "5:13: tls.key_file: the key in '%s/b.key' does not match the "
        "certificate in tls.cert_file");
}

Test(config, tls_not_pem)
{
    char  path[256], want[512];
    FILE *fp;

    tc_cert("a");
    snprintf(path, sizeof(path), "%s/junk.pem", tdir);
    cr_assert_not_null(fp = fopen(path, "w"));
    fputs("this is not PEM\n", fp);
    fclose(fp);
    cr_assert_null(tc_tls_load("tls:\n  cert_file: %s/junk.pem\n"
        "  key_file: %s/a.key\n"));
    snprintf(want, sizeof(want), "%s:4:14: tls.cert_file: no usable PEM "
        "certificate in '%s': ", tpath, path);
    cr_assert_eq(strncmp(terr, want, strlen(want)), 0, "got: %s", terr);
    cr_assert_null(strchr(terr, '\n'), "one line: %s", terr);
    cr_assert_null(tc_tls_load("tls:\n  cert_file: %s/a.crt\n"
        "  key_file: %s/junk.pem\n"));
    snprintf(want, sizeof(want), "%s:5:13: tls.key_file: no usable PEM "
        "private key in '%s': ", tpath, path);
    cr_assert_eq(strncmp(terr, want, strlen(want)), 0, "got: %s", terr);
}

Test(config, tls_bad_version_and_ciphers)
{
    tc_cert("a");
    tc_tls_bad("tls:\n  cert_file: %s/a.crt\n  key_file: %s/a.key\n"
        "  min_version: TLSv1.1\n  ciphers: NO-SUCH-CIPHER\n",
        "6:16: tls.min_version: expected TLSv1.2 or TLSv1.3, got "
        "'TLSv1.1'\n%s/relay.yaml:7:12: tls.ciphers: no usable cipher in "
        "'NO-SUCH-CIPHER'");
}

Test(config, tls_not_a_mapping)
{
    tc_tls_bad("tls: yes\n",
        "3:6: tls: expected a mapping of keys (cert_file, key_file, "
        "min_version, ciphers, ca_file), got 'yes'");
}


Test(config, outbound_tls_level_and_ca_file)
{
    struct config *c;
    char           want[256];

    c = tc_tls_load("");
    cr_assert_not_null(c, "%s", terr);
    cr_assert_eq(c->delivery_tls, 1, "default: may");
    cr_assert_null(c->tls_ca_file, "default: the system's");
    config_free(c);
    tc_cert("ca");
    c = tc_tls_load("delivery:\n  tls: dane-only\ntls:\n  ca_file: "
        "%s/ca.crt\n");
    cr_assert_not_null(c, "%s", terr);
    cr_assert_eq(c->delivery_tls, 5);
    snprintf(want, sizeof(want), "%s/ca.crt", tdir);
    cr_assert_str_eq(c->tls_ca_file, want);
    config_free(c);
    tc_tls_bad("delivery:\n  tls: always\n",
        "4:8: delivery.tls: expected none, may, encrypt, verify, dane or "
        "dane-only, got 'always'");
    tc_tls_bad("tls:\n  ca_file: %s/missing.pem\n",
        "4:12: tls.ca_file: cannot read '%s/missing.pem': No such file or "
        "directory");
    tc_cert("junk");
    /* a key is no certificate */
    cr_assert_null(tc_tls_load("tls:\n  ca_file: %s/junk.key\n"));
    snprintf(want, sizeof(want), "%s:4:12: tls.ca_file: no usable PEM "
        "certificate in '%s/junk.key'", tpath, tdir);
    cr_assert_eq(strncmp(terr, want, strlen(want)), 0, "got: %s", terr);
}


Test(config, dns_defaults_and_values)
{
    struct config *c = tc_load_ok("routes:\n  default: mx\n");

    cr_expect_null(c->dns_servers, "default: /etc/resolv.conf");
    cr_expect_eq(c->dns_timeout_ms, 5000);
    cr_expect_eq(c->dns_attempts, 2);
    cr_expect_eq(c->dns_min_ttl_ms, 0);
    cr_expect_eq(c->dns_max_ttl_ms, 86400000ull);
    cr_expect_eq(c->dns_cache_size, 10000);
    cr_expect_eq(c->dns_address_family, CONFIG_DNS_BOTH);
    cr_expect_eq(c->dns_prefer, CONFIG_DNS_IPV4);
    cr_expect_eq(c->dns_address_limit, 5);
    config_free(c);

    c = tc_load_ok("routes:\n  default: mx\ndns:\n"
        "  servers: [\"127.0.0.1:5353\", \"[::1]:53\", 192.0.2.1, \"::1\"]\n"
        "  timeout: 800ms\n  attempts: 3\n  min_ttl: 1m\n  max_ttl: 1h\n"
        "  cache_size: 50\n  address_family: IPv6\n  prefer: ipv6\n"
        "  address_limit: 9\n");
    cr_expect_str_eq(c->dns_servers, "127.0.0.1:5353,[::1]:53,192.0.2.1,::1");
    cr_expect_eq(c->dns_timeout_ms, 800);
    cr_expect_eq(c->dns_attempts, 3);
    cr_expect_eq(c->dns_min_ttl_ms, 60000);
    cr_expect_eq(c->dns_max_ttl_ms, 3600000);
    cr_expect_eq(c->dns_cache_size, 50);
    cr_expect_eq(c->dns_address_family, CONFIG_DNS_IPV6);
    cr_expect_eq(c->dns_prefer, CONFIG_DNS_IPV6);
    cr_expect_eq(c->dns_address_limit, 9);
    config_free(c);

    c = tc_load_ok("routes:\n  default: mx\ndns:\n"
        "  servers: \"10.0.0.1, 10.0.0.2:53\"\n");
    cr_expect_str_eq(c->dns_servers, "10.0.0.1, 10.0.0.2:53");
    config_free(c);
}

Test(config, dns_bad_values)
{
    tc_load_bad("routes:\n  default: mx\ndns:\n"
        "  servers: [127.0.0.1, ns1.example]\n"
        "  address_family: ipv5\n  prefer: both\n  attempts: 11\n",
        "%P:4:24: dns.servers[1]: expected resolver addresses like "
        "\"127.0.0.1\", \"127.0.0.1:5353\" or \"[::1]:53\", got "
        "'ns1.example'\n"
        "%P:5:19: dns.address_family: expected ipv4, ipv6 or both, got "
        "'ipv5'\n"
        "%P:6:11: dns.prefer: expected ipv4 or ipv6, got 'both'\n"
        "%P:7:13: dns.attempts: expected an integer from 1 to 10, got '11'");
    tc_load_bad("routes:\n  default: mx\ndns:\n  servers: \"1.2.3.4,,5.6.7.8\"\n",
        "%P:4:12: dns.servers: expected resolver addresses like "
        "\"127.0.0.1\", \"127.0.0.1:5353\" or \"[::1]:53\", got "
        "'1.2.3.4,,5.6.7.8'");
    tc_load_bad("routes:\n  default: mx\ndns:\n  min_ttl: 2h\n  max_ttl: 1h\n",
        "%P:4:12: dns.min_ttl: must not be above dns.max_ttl (7200s > "
        "3600s)");
}


/* The resource limits, their defaults and errors. */
Test(config, session_resource_limits)
{
    struct config *c = tc_load_ok("routes:\n  default: discard\n");

    cr_assert_eq(c->ipv6_prefix, 64);
    cr_assert_eq(c->session_lifetime_ms, 3600 * 1000ULL);
    cr_assert_eq(c->max_junk_commands, 100);
    cr_assert_eq(c->max_envelope_size, 256 * 1024ULL);
    config_free(c);
    c = tc_load_ok("routes:\n  default: discard\nlimits:\n"
        "  ipv6_prefix: 48\n  session_lifetime: 90s\n"
        "  max_junk_commands: 7\n  max_envelope_size: 1M\n");
    cr_assert_eq(c->ipv6_prefix, 48);
    cr_assert_eq(c->session_lifetime_ms, 90 * 1000ULL);
    cr_assert_eq(c->max_junk_commands, 7);
    cr_assert_eq(c->max_envelope_size, 1024 * 1024ULL);
    config_free(c);
    tc_load_bad("routes:\n  default: discard\nlimits:\n"
        "  ipv6_prefix: 129\n  session_lifetime: 0s\n"
        "  max_junk_commands: many\n  max_envelope_size: 0\n",
        "%P:4:16: limits.ipv6_prefix: expected an integer from 1 to 128, "
        "got '129'\n"
        "%P:5:21: limits.session_lifetime: expected a duration greater "
        "than 0, got '0s'\n"
        "%P:6:22: limits.max_junk_commands: expected an integer from 1 to "
        "2147483647, got 'many'\n"
        "%P:7:22: limits.max_envelope_size: expected a size greater than 0, "
        "got '0'");
}


/* ---- dkim ------------------------------------------------------------- */

Test(config, dkim_sign_keys_and_networks)
{
    struct config *cfg;
    char           key[300], text[1024];
    EVP_PKEY      *pk;
    FILE          *f;

    cfg = tc_load_ok("routes:\n  default: discard\n");
    cr_assert_eq(cfg->ndkim_sign, 0);
    cr_assert_eq(cfg->ndkim_sign_networks, cfg->nallow_networks,
        "sign_networks defaults to relay.allow_networks");
    cr_assert(memcmp(cfg->dkim_sign_networks, cfg->allow_networks,
        cfg->nallow_networks * sizeof(struct cidr)) == 0);
    config_free(cfg);
    cfg = tc_load_ok("relay:\n  allow_networks: [10.0.0.0/8]\n"
        "routes:\n  default: discard\n");
    cr_assert_eq(cfg->ndkim_sign_networks, 1);
    cr_assert(memcmp(cfg->dkim_sign_networks, cfg->allow_networks,
        sizeof(struct cidr)) == 0);
    config_free(cfg);

    snprintf(key, sizeof(key), "%s/a.key", tdir);
    cr_assert_not_null(pk = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519"));
    cr_assert_not_null(f = fopen(key, "w"));
    cr_assert_eq(PEM_write_PrivateKey(f, pk, NULL, NULL, 0, NULL, NULL), 1);
    fclose(f);
    EVP_PKEY_free(pk);
    snprintf(text, sizeof(text), "routes:\n  default: discard\n"
        "dkim:\n"
        "  sign:\n"
        "    - domain: example.org\n"
        "      selector: s1\n"
        "      key_file: %s\n"
        "      algorithm: ed25519-sha256\n"
        "  sign_networks: [192.0.2.0/24, \"2001:db8::/32\"]\n", key);
    cfg = tc_load_ok(text);
    cr_assert_eq(cfg->ndkim_sign, 1);
    cr_assert_str_eq(cfg->dkim_sign[0].domain, "example.org");
    cr_assert_str_eq(cfg->dkim_sign[0].selector, "s1");
    cr_assert_str_eq(cfg->dkim_sign[0].key_file, key);
    cr_assert_eq(cfg->dkim_sign[0].algorithm, DKIM_ED25519_SHA256);
    cr_assert_eq(cfg->ndkim_sign_networks, 2);
    config_free(cfg);

    /* the same key named as RSA (the default algorithm): its line */
    snprintf(text, sizeof(text), "routes:\n  default: discard\n"
        "dkim:\n"
        "  sign:\n"
        "    - domain: example.org\n"
        "      selector: s1\n"
        "      key_file: %s\n", key);
    tc_write(text);
    cr_assert_null(config_load(tpath, terr, sizeof(terr)));
    cr_assert_not_null(strstr(terr, "relay.yaml:7:17: dkim.sign[0].key_file: '"),
        "%s", terr);
    cr_assert_not_null(strstr(terr, "' is not an RSA key (algorithm is "
        "rsa-sha256)"), "%s", terr);
    tc_load_bad("routes:\n  default: discard\n"
        "dkim:\n  sign:\n    - domain: nodot\n      selector: \"a b\"\n"
        "      keyfile: x\n",
        "%P:5:15: dkim.sign[0].domain: expected a domain like example.org, "
        "got 'nodot'\n"
        "%P:6:17: dkim.sign[0].selector: expected a selector like s1 "
        "(letters, digits, '-', '_', '.'), got 'a b'\n"
        "%P:7:7: dkim.sign[0].keyfile: unknown key 'keyfile' (expected one "
        "of: domain, selector, key_file, algorithm)");
}


/* --- operations keys ------------------------------------------ */

Test(config, ops_keys_defaults)
{
    struct config *cfg = tc_load_ok("routes:\n  default: discard\n");

    cr_assert_eq(cfg->load_queue_only_x100, 0);
    cr_assert_eq(cfg->load_refuse_x100, 0);
    cr_assert_str_eq(cfg->load_file, "/proc/loadavg");
    cr_assert_eq(cfg->log_format, LOG_FORMAT_TEXT);
    cr_assert_null(cfg->metrics_listen);
    cr_assert_eq(cfg->nmetrics_allow, 2);       /* loopback */
    cr_assert_eq(cfg->metrics_allow[0].family, AF_INET);
    cr_assert_eq(cfg->metrics_allow[0].prefix, 8);
    cr_assert_eq(cfg->metrics_allow[1].family, AF_INET6);
    cr_assert_eq(cfg->metrics_max_per_ip, 4);
    cr_assert_eq(cfg->metrics_header_timeout_ms, 2000);
    config_free(cfg);
}

Test(config, ops_keys_set)
{
    struct config *cfg = tc_load_ok("routes:\n  default: discard\n"
        "limits:\n  load:\n    queue_only: 4\n    refuse: 12.5\n"
        "    file: /tmp/loadavg\nlog:\n  format: json\n"
        "metrics:\n  listen: \"[::1]:9325\"\n  allow_networks: "
        "[10.0.0.0/8]\n  max_connections_per_ip: 2\n"
        "  header_timeout: 500ms\n");

    cr_assert_eq(cfg->load_queue_only_x100, 400);
    cr_assert_eq(cfg->load_refuse_x100, 1250);
    cr_assert_str_eq(cfg->load_file, "/tmp/loadavg");
    cr_assert_eq(cfg->log_format, LOG_FORMAT_JSON);
    cr_assert_str_eq(cfg->metrics_listen, "[::1]:9325");
    cr_assert_eq(cfg->metrics_addr.ss_family, AF_INET6);
    cr_assert_eq(cfg->nmetrics_allow, 1);
    cr_assert_eq(cfg->metrics_allow[0].prefix, 8);
    cr_assert_eq(cfg->metrics_max_per_ip, 2);
    cr_assert_eq(cfg->metrics_header_timeout_ms, 500);
    config_free(cfg);
}

Test(config, ops_keys_bad)
{
    tc_load_bad("routes:\n  default: discard\nlimits:\n  load:\n"
        "    refuse: -1\n",
        "%P:5:13: limits.load.refuse: expected a load average like 8 or "
        "12.5 (0 = off), got '-1'");
    tc_load_bad("routes:\n  default: discard\nlog:\n  format: xml\n",
        "%P:4:11: log.format: expected text or json, got 'xml'");
    tc_load_bad("routes:\n  default: discard\nmetrics:\n  listen: nowhere\n",
        "%P:4:11: metrics.listen: expected an address like "
        "\"127.0.0.1:9325\" or \"[::1]:9325\", got 'nowhere'");
    tc_load_bad("routes:\n  default: discard\nmetrics:\n  port: 1\n",
        "%P:4:3: metrics.port: unknown key 'port' (expected one of: "
        "listen, allow_networks, max_connections_per_ip, header_timeout)");
    tc_load_bad("routes:\n  default: discard\nmetrics:\n"
        "  allow_networks: [10.0.0.0/33]\n",
        "%P:4:20: metrics.allow_networks[0]: expected a network like "
        "10.0.0.0/8 or 2001:db8::/32, got '10.0.0.0/33'");
    tc_load_bad("routes:\n  default: discard\nmetrics:\n"
        "  max_connections_per_ip: 0\n",
        "%P:4:27: metrics.max_connections_per_ip: expected an integer "
        "from 1 to 1024, got '0'");
}


/* tc_cert_rsa - an RSA-2048 certificate tdir/NAME.crt and tdir/NAME.key. */
static void
tc_cert_rsa(const char *name)
{
    char cmd[1024];

    snprintf(cmd, sizeof(cmd), "openssl req -x509 -newkey rsa:2048 -nodes "
        "-keyout %s/%s.key -out %s/%s.crt -days 2 -subj /CN=mx.example.net "
        ">/dev/null 2>&1", tdir, name, tdir, name);
    cr_assert_eq(system(cmd), 0, "openssl req failed: %s", cmd);
}

Test(config, tls_rsa_and_ecdsa_lists)
{
    struct config *c;
    char           want[256];

    tc_cert_rsa("r");
    tc_cert("a");
    c = tc_tls_load("tls:\n  cert_file: [%1$s/r.crt, %1$s/a.crt]\n"
        "  key_file:\n    - %1$s/r.key\n    - %1$s/a.key\n");
    cr_assert_not_null(c, "config_load failed: %s", terr);
    cr_assert_eq(c->ntls_certs, 2);
    snprintf(want, sizeof(want), "%s/r.crt", tdir);
    cr_assert_str_eq(c->tls_cert_files[0], want);
    cr_assert_str_eq(c->tls_cert_file, want, "the first, as before");
    snprintf(want, sizeof(want), "%s/a.key", tdir);
    cr_assert_str_eq(c->tls_key_files[1], want);
    cr_assert_null(c->tls_cert_files[2]);
    config_free(c);
    /* One string is still one certificate. */
    c = tc_tls_load("tls:\n  cert_file: %1$s/a.crt\n  key_file: [%1$s/a.key]\n");
    cr_assert_not_null(c, "config_load failed: %s", terr);
    cr_assert_eq(c->ntls_certs, 1);
    config_free(c);
}

Test(config, tls_list_errors_name_the_item)
{
    tc_cert_rsa("r");
    tc_cert("a");
    tc_cert("b");
    tc_tls_bad("tls:\n  cert_file: [%1$s/r.crt, %1$s/a.crt]\n"
        "  key_file: %1$s/r.key\n",
        "5:13: tls.key_file: 1 key for 2 certificates in tls.cert_file; "
        "give one key per certificate, in the same order");
    tc_tls_bad("tls:\n  cert_file:\n    - %1$s/r.crt\n    - {}\n"
        "  key_file: %1$s/r.key\n",
        "6:7: tls.cert_file[1]: expected a file name, got an empty mapping");
    tc_tls_bad("tls:\n  cert_file: [a, b, c, d, e]\n  key_file: k\n",
        "4:14: tls.cert_file: expected a file name or a list of 1 to 4 "
        "file names, got a sequence");
    {
        char want[2048];

        cr_assert_null(tc_tls_load("tls:\n  cert_file: [%1$s/a.crt, "
            "%1$s/b.crt]\n  key_file: [%1$s/a.key, %1$s/b.key]\n"));
        snprintf(want, sizeof(want), "%s:4:%zu: tls.cert_file: '%s/b.crt' "
            "has the same key type (id-ecPublicKey) as '%s/a.crt'; give at "
            "most one certificate per key type (for example one RSA and one "
            "ECDSA)", tpath, 15 + strlen(tdir) + strlen("/a.crt, "), tdir,
            tdir);
        cr_assert_str_eq(terr, want);
    }
}

Test(config, tlsrpt_defaults_and_keys)
{
    struct config *c = tc_load_ok("server:\n  hostname: mx.example.org\n"
        "routes:\n  default: discard\n");

    cr_assert_eq(c->tlsrpt_enabled, 0);
    cr_assert_str_eq(c->tlsrpt_organization, "mx.example.org");
    cr_assert_str_eq(c->tlsrpt_contact, "postmaster@mx.example.org");
    cr_assert_str_eq(c->tlsrpt_sender, "postmaster@mx.example.org");
    config_free(c);
    c = tc_load_ok("routes:\n  default: discard\ntlsrpt:\n  enabled: true\n"
        "  organization: Example Inc.\n  contact: https://example.org/tls\n"
        "  sender: tlsrpt@example.org\n");
    cr_assert_eq(c->tlsrpt_enabled, 1);
    cr_assert_str_eq(c->tlsrpt_organization, "Example Inc.");
    cr_assert_str_eq(c->tlsrpt_contact, "https://example.org/tls");
    cr_assert_str_eq(c->tlsrpt_sender, "tlsrpt@example.org");
    config_free(c);
}

Test(config, tlsrpt_sender_must_be_a_plain_address)
{
    tc_load_bad("routes:\n  default: discard\ntlsrpt:\n"
        "  sender: Reports <r@example.org>\n",
        "%P: tlsrpt.sender: not a plain address (local@domain): "
        "Reports <r@example.org>");
    tc_load_bad("routes:\n  default: discard\ntlsrpt:\n  sender: nobody\n",
        "%P: tlsrpt.sender: not a plain address (local@domain): nobody");
}
