/*
 * test_config_listen.c - server.listen entries in their map form
 * {address, proxy_protocol, proxy_from}: what a good entry loads into
 * struct config_listen, that a string entry is unchanged, and the exact
 * FILE:LINE:COL message of each kind of error.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/stat.h>

#include <criterion/criterion.h>

#include "common/util.h"
#include "config/config.h"
#include "proxy/proxy.h"

static char tdir[64];
static char tpath[128];
static char terr[8192];

static void
tl_setup(void)
{
    util_strlcpy(tdir, "/tmp/mtad-test-listen-XXXXXX", sizeof(tdir));
    cr_assert_not_null(mkdtemp(tdir), "mkdtemp: %s", strerror(errno));
    snprintf(tpath, sizeof(tpath), "%s/relay.yaml", tdir);
}

static void
tl_teardown(void)
{
    unlink(tpath);
    rmdir(tdir);
}

TestSuite(config_listen, .init = tl_setup, .fini = tl_teardown);

static struct config *
tl_load(const char *listen)
{
    FILE *fp = fopen(tpath, "w");

    cr_assert_not_null(fp);
    fprintf(fp, "server:\n  listen:\n%sroutes:\n  default: discard\n",
        listen);
    cr_assert_eq(fclose(fp), 0);
    terr[0] = '\0';
    return config_load(tpath, terr, sizeof(terr));
}

/* the message without the temp dir: "relay.yaml:L:C: ..." */
static const char *
tl_err(void)
{
    const char *p = strstr(terr, "relay.yaml:");

    return p != NULL ? p : terr;
}

Test(config_listen, string_and_map_entries)
{
    struct config *cfg = tl_load(
        "    - \"127.0.0.1:2525\"\n"
        "    - address: \"127.0.0.1:2526\"\n"
        "      proxy_protocol: v2\n"
        "      proxy_from: [10.0.0.0/8, \"2001:db8::/32\"]\n"
        "    - {address: \"[::1]:2527\", proxy_protocol: auto, "
        "proxy_from: [\"::1/128\"]}\n"
        "    - address: \"127.0.0.1:2528\"\n");

    cr_assert_not_null(cfg, "%s", terr);
    cr_assert_eq(cfg->nlisten, 4);
    cr_assert_str_eq(cfg->listen[0].spec, "127.0.0.1:2525");
    cr_assert_eq(cfg->listen[0].proxy, 0);
    cr_assert_eq(cfg->listen[0].nproxy_from, 0);
    cr_assert_str_eq(cfg->listen[1].spec, "127.0.0.1:2526");
    cr_assert_eq(cfg->listen[1].proxy, PROXY_V2);
    cr_assert_eq(cfg->listen[1].nproxy_from, 2);
    cr_assert_eq(cfg->listen[2].proxy, PROXY_AUTO);
    cr_assert_eq(cfg->listen[2].addr.ss_family, AF_INET6);
    cr_assert_eq(cfg->listen[3].proxy, 0);
    for (size_t i = 0; i < 4; i++) {
        cr_assert_eq(cfg->listen[i].role, CONFIG_ROLE_MX);
        cr_assert_eq(cfg->listen[i].tls_implicit, 0);
    }
    config_free(cfg);
}

Test(config_listen, role_and_tls)
{
    struct config *cfg;
    FILE          *fp;
    char           pw[160];

    snprintf(pw, sizeof(pw), "%s/passwd", tdir);
    fp = fopen(pw, "w");
    cr_assert_not_null(fp);
    fprintf(fp, "# users\nalice:$6$salt$hash\n");
    cr_assert_eq(fclose(fp), 0);
    fp = fopen(tpath, "w");
    cr_assert_not_null(fp);
    fprintf(fp, "server:\n  listen:\n    - \"127.0.0.1:25\"\n"
        "    - {address: \"127.0.0.1:587\", role: submission, "
        "tls: starttls}\n    - {address: \"127.0.0.1:26\", role: mx}\n"
        "auth:\n  password_file: %s\n  max_failures: 3\n"
        "  failure_delay: 250ms\n  failure_delay_max: 2m\n"
        "  received_header: true\nsubmission:\n  sender_login_match: true\n"
        "routes:\n  default: discard\n", pw);
    cr_assert_eq(fclose(fp), 0);
    cfg = config_load(tpath, terr, sizeof(terr));
    unlink(pw);
    cr_assert_not_null(cfg, "%s", terr);
    cr_assert_eq(cfg->listen[0].role, CONFIG_ROLE_MX);
    cr_assert_eq(cfg->listen[1].role, CONFIG_ROLE_SUBMISSION);
    cr_assert_eq(cfg->listen[1].tls_implicit, 0);
    cr_assert_eq(cfg->listen[2].role, CONFIG_ROLE_MX);
    cr_assert_str_eq(cfg->auth_password_file, pw);
    cr_assert_eq(cfg->auth_max_failures, 3);
    cr_assert_eq(cfg->auth_failure_delay_ms, 250);
    cr_assert_eq(cfg->auth_failure_delay_max_ms, 120000);
    cr_assert(cfg->auth_received_header);
    cr_assert(!cfg->auth_allow_plaintext_loopback);
    cr_assert(cfg->submission_sender_login_match);
    config_free(cfg);
}

static const struct {
    const char *listen;
    const char *want;           /* the start of the message */
} bad[] = {
    { "    - address: \"127.0.0.1:1\"\n      backlog: 10\n",
      "relay.yaml:4:7: server.listen[0].backlog: unknown key 'backlog' "
      "(expected one of: address, proxy_protocol, proxy_from, role, tls, "
      "pregreet, pregreet_multiline, dnsbl, greylist, milters)" },
    { "    - address: \"127.0.0.1:1\"\n      pregreet: soon\n",
      "relay.yaml:4:17: server.listen[0].pregreet: expected a duration" },
    { "    - address: \"127.0.0.1:1\"\n      pregreet: 2m\n",
      "relay.yaml:4:17: server.listen[0].pregreet: expected a pause of at "
      "most 1m, got '2m'" },
    { "    - address: \"127.0.0.1:1\"\n      pregreet_multiline: maybe\n",
      "relay.yaml:4:27: server.listen[0].pregreet_multiline: expected true "
      "or false, got 'maybe'" },
    { "    - address: \"127.0.0.1:1\"\n      pregreet: 1s\n"
      "      role: submission\n",
      "relay.yaml:4:7: server.listen[0].pregreet: only on a listener with "
      "role mx in clear text (not role: submission)" },
    { "    - address: \"127.0.0.1:1\"\n      tls: implicit\n"
      "      pregreet_multiline: true\n",
      "relay.yaml:5:7: server.listen[0].pregreet_multiline: only on a "
      "listener with role mx in clear text (not tls: implicit)" },
    { "    - address: \"127.0.0.1:1\"\n      dnsbl: true\n"
      "      tls: implicit\n",
      "relay.yaml:4:7: server.listen[0].dnsbl: only on a listener with "
      "role mx in clear text (not tls: implicit)" },
    { "    - address: \"127.0.0.1:1\"\n      role: relay\n",
      "relay.yaml:4:13: server.listen[0].role: expected mx or submission, "
      "got 'relay'" },
    { "    - address: \"127.0.0.1:1\"\n      tls: yes\n",
      "relay.yaml:4:12: server.listen[0].tls: expected implicit or "
      "starttls, got 'yes'" },
    { "    - address: \"127.0.0.1:1\"\n      tls: implicit\n",
      "relay.yaml:3:7: server.listen 127.0.0.1:1: tls: implicit needs "
      "tls.cert_file" },
    { "    - address: \"127.0.0.1:1\"\n      role: submission\n",
      "relay.yaml:3:7: server.listen 127.0.0.1:1: role: submission needs "
      "auth.password_file" },
    { "    - address: \"127.0.0.1:1\"\n      proxy_protocol: V2\n"
      "      proxy_from: [10.0.0.0/8]\n",
      "relay.yaml:4:23: server.listen[0].proxy_protocol: expected v1, v2 or "
      "auto, got 'V2'" },
    { "    - address: \"127.0.0.1:1\"\n      proxy_protocol: v2\n",
      "relay.yaml:4:7: server.listen[0].proxy_protocol: needs proxy_from" },
    { "    - address: \"127.0.0.1:1\"\n      proxy_from: [10.0.0.0/8]\n",
      "relay.yaml:4:7: server.listen[0].proxy_from: only with "
      "proxy_protocol" },
    { "    - address: \"127.0.0.1:1\"\n      proxy_protocol: v1\n"
      "      proxy_from: []\n",
      "relay.yaml:5:19: server.listen[0].proxy_from: expected at least one "
      "network" },
    { "    - address: \"127.0.0.1:1\"\n      proxy_protocol: v1\n"
      "      proxy_from: 10.0.0.0/8\n",
      "relay.yaml:5:19: server.listen[0].proxy_from: expected a sequence of "
      "networks" },
    { "    - proxy_protocol: v1\n      proxy_from: [10.0.0.0/8]\n",
      "relay.yaml:3:7: server.listen[0]: missing key address" },
    { "    - address: \"nope\"\n",
      "relay.yaml:3:16: server.listen[0].address: expected host:port" },
    { "    - address: [\"127.0.0.1:1\"]\n",
      "relay.yaml:3:16: server.listen[0].address: expected host:port" },
    { "    - {}\n",
      "relay.yaml:3:7: server.listen[0]: missing key address" },
};

Test(config_listen, errors_name_file_line_col)
{
    struct config *cfg;
    size_t         i;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cfg = tl_load(bad[i].listen);
        cr_assert_null(cfg, "case %zu loaded", i);
        cr_assert(strncmp(tl_err(), bad[i].want, strlen(bad[i].want)) == 0,
            "case %zu:\n got: %s\nwant: %s", i, tl_err(), bad[i].want);
    }
}


/* auth.failure_delay: defaults 1s doubling to 8s; the cap at most 5m;
 * the delay not above its cap (checked without a password file too). */
Test(config_listen, auth_failure_delay)
{
    static const struct {
        const char *auth;
        const char *want;
    } cases[] = {
        { "  failure_delay_max: 6m\n",
          "relay.yaml: auth.failure_delay_max: at most 5m" },
        { "  failure_delay: 10s\n  failure_delay_max: 5s\n",
          "relay.yaml: auth.failure_delay: greater than "
          "auth.failure_delay_max" },
        { "  failure_delay: soon\n",
          "relay.yaml:4:18: auth.failure_delay: expected a duration" },
    };
    struct config *cfg;
    FILE          *fp;
    size_t         i;

    cfg = tl_load("    - \"127.0.0.1:25\"\n");
    cr_assert_not_null(cfg, "%s", tl_err());
    cr_assert_eq(cfg->auth_failure_delay_ms, 1000);
    cr_assert_eq(cfg->auth_failure_delay_max_ms, 8000);
    config_free(cfg);
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        fp = fopen(tpath, "w");
        cr_assert_not_null(fp);
        fprintf(fp, "server:\n  listen: [\"127.0.0.1:25\"]\nauth:\n%s"
            "routes:\n  default: discard\n", cases[i].auth);
        cr_assert_eq(fclose(fp), 0);
        cfg = config_load(tpath, terr, sizeof(terr));
        cr_assert_null(cfg, "case %zu loaded", i);
        cr_assert(strstr(terr, cases[i].want) != NULL,
            "case %zu:\n got: %s\nwant: %s", i, terr, cases[i].want);
    }
}


/* Keys checked after the walk (a file they name, a directory) still say
 * where they are: auth.password_file missing or with a bad line,
 * log.file in a directory that does not exist. */
Test(config_listen, late_checks_name_line_col)
{
    struct config *cfg;
    FILE          *fp;
    char           pw[160];

    snprintf(pw, sizeof(pw), "%s/passwd", tdir);
    cfg = tl_load("    - \"127.0.0.1:1\"\nauth:\n"
        "  password_file: /nonexistent/passwd\n");
    cr_assert_null(cfg);
    cr_assert(strstr(terr, "relay.yaml:5:18: auth.password_file: "
        "/nonexistent/passwd: No such file or directory") != NULL, "%s", terr);

    fp = fopen(pw, "w");
    cr_assert_not_null(fp);
    fprintf(fp, "alice:$6$salt$hash\nbob\n");
    cr_assert_eq(fclose(fp), 0);
    cr_assert_eq(chmod(pw, 0600), 0);
    fp = fopen(tpath, "w");
    cr_assert_not_null(fp);
    fprintf(fp, "server:\n  listen: [\"127.0.0.1:1\"]\nauth:\n"
        "  password_file: %s\nlog:\n  file: /nonexistent/dir/mtad.log\n"
        "routes:\n  default: discard\n", pw);
    cr_assert_eq(fclose(fp), 0);
    cfg = config_load(tpath, terr, sizeof(terr));
    unlink(pw);
    cr_assert_null(cfg);
    cr_assert(strstr(terr, "relay.yaml:4:18: auth.password_file: ") != NULL &&
        strstr(terr, "/passwd:2: expected user:hash") != NULL, "%s", terr);
    cr_assert(strstr(terr, "relay.yaml:6:9: log.file: /nonexistent/dir: "
        "No such file or directory") != NULL, "%s", terr);
}


/* The screen's keys: a listener's pause and the DNS lists. */
static struct config *
tl_load_text(const char *text)
{
    FILE *fp = fopen(tpath, "w");

    cr_assert_not_null(fp);
    fprintf(fp, "%sroutes:\n  default: discard\n", text);
    cr_assert_eq(fclose(fp), 0);
    terr[0] = '\0';
    return config_load(tpath, terr, sizeof(terr));
}

Test(config_listen, screen_keys)
{
    struct config *cfg = tl_load_text(
        "server:\n  listen:\n    - \"127.0.0.1:2525\"\n"
        "    - {address: \"127.0.0.1:2526\", pregreet: 300ms, "
        "pregreet_multiline: yes, dnsbl: off}\n"
        "screen:\n  dnsbl:\n    - zone: BL.Example.org.\n"
        "      match: \"127.0.0.[2..11]\"\n"
        "    - {zone: wl.example.org, weight: -5}\n"
        "  threshold: 3\n  timeout: 750ms\n");

    cr_assert_not_null(cfg, "%s", terr);
    cr_assert_eq(cfg->listen[0].pregreet_ms, 0);
    cr_assert_eq(cfg->listen[0].pregreet_multiline, 0);
    cr_assert_eq(cfg->listen[0].no_dnsbl, 0);
    cr_assert_eq(cfg->listen[1].pregreet_ms, 300);
    cr_assert_eq(cfg->listen[1].pregreet_multiline, 1);
    cr_assert_eq(cfg->listen[1].no_dnsbl, 1);
    cr_assert_eq(cfg->nscreen_dnsbl, 2);
    cr_assert_str_eq(cfg->screen_dnsbl[0].zone, "bl.example.org");
    cr_assert_eq(cfg->screen_dnsbl[0].weight, 1);
    cr_assert_str_eq(cfg->screen_dnsbl[0].match, "127.0.0.[2..11]");
    cr_assert_not_null(cfg->screen_dnsbl[0].filter);
    cr_assert_str_eq(cfg->screen_dnsbl[1].zone, "wl.example.org");
    cr_assert_eq(cfg->screen_dnsbl[1].weight, -5);
    cr_assert_null(cfg->screen_dnsbl[1].match);
    cr_assert_null(cfg->screen_dnsbl[1].filter);
    cr_assert_eq(cfg->screen_threshold, 3);
    cr_assert_eq(cfg->screen_timeout_ms, 750);
    config_free(cfg);
    cfg = tl_load_text("");
    cr_assert_not_null(cfg, "%s", terr);
    cr_assert_eq(cfg->nscreen_dnsbl, 0);
    cr_assert_eq(cfg->screen_threshold, 1);
    cr_assert_eq(cfg->screen_timeout_ms, 2000);
    config_free(cfg);
}

static const struct {
    const char *screen;
    const char *want;
} bad_screen[] = {
    { "  dnsbl:\n    - {weight: 2}\n",
      "relay.yaml:3:7: screen.dnsbl[0].zone: required key is missing" },
    { "  dnsbl:\n    - {zone: \"bl example\"}\n",
      "relay.yaml:3:14: screen.dnsbl[0].zone: expected a DNS zone" },
    { "  dnsbl:\n    - {zone: bl.test, weight: 0}\n",
      "relay.yaml:3:31: screen.dnsbl[0].weight: expected a whole number "
      "from -1000 to 1000, not 0" },
    { "  dnsbl:\n    - {zone: bl.test, weight: -1001}\n",
      "relay.yaml:3:31: screen.dnsbl[0].weight: expected a whole number" },
    { "  dnsbl:\n    - {zone: bl.test, match: \"127.0.0.[11..2]\"}\n",
      "relay.yaml:3:30: screen.dnsbl[0].match: expected a return-code "
      "filter like 127.0.0.2" },
    { "  dnsbl:\n    - {zone: bl.test, ttl: 5}\n",
      "relay.yaml:3:23: screen.dnsbl[0].ttl: unknown key 'ttl' (expected "
      "one of: zone, weight, match)" },
    { "  dnsbl:\n    - {zone: bl.test}\n    - {zone: BL.test}\n",
      "relay.yaml:4:7: screen.dnsbl[1]: zone bl.test is listed twice "
      "(also screen.dnsbl[0])" },
    { "  dnsbl: bl.test\n",
      "relay.yaml:2:10: screen.dnsbl: expected a sequence of {zone, "
      "weight, match}" },
    { "  threshold: 0\n",
      "relay.yaml:2:14: screen.threshold: expected" },
};

Test(config_listen, screen_errors_name_file_line_col)
{
    char   text[512];
    size_t i;

    for (i = 0; i < sizeof(bad_screen) / sizeof(bad_screen[0]); i++) {
        snprintf(text, sizeof(text), "screen:\n%s", bad_screen[i].screen);
        cr_assert_null(tl_load_text(text), "case %zu loaded", i);
        cr_assert(strncmp(tl_err(), bad_screen[i].want,
            strlen(bad_screen[i].want)) == 0,
            "case %zu:\n got: %s\nwant: %s", i, tl_err(), bad_screen[i].want);
    }
}
