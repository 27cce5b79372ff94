/*
 * config.c - load relay.yaml (libyaml document API) into struct config.
 *
 * CONTRACT  One table per section names every key, its type and where it
 *           goes in struct config; anything not in a table is an error.
 *           Every default is filled in before the file is read, so a key
 *           that is absent keeps its default and a key that is present
 *           replaces it.  Relative paths are kept as written: they are
 *           relative to the working directory mtad was started in.
 *           An empty section ("server:" with nothing under it) is an empty
 *           mapping; an empty value for a key is an error.
 * FAILURE   Never logs and never stops at the first problem: every problem
 *           becomes one line "FILE:LINE:COL: KEY: message" (LINE and COL
 *           1-based, from the yaml mark of the offending node), and
 *           config_load() returns NULL with all of them in err.
 *
 * This file holds the key tables, the walk over sections and load/free;
 * config_int.h lists the other parts (messages and scalar helpers,
 * listen entries, value setters, tls, dkim).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sys/un.h>

#include <yaml.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "common/log.h"
#include "common/safefs.h"
#include "common/status.h"
#include "common/util.h"
#include "proxy/proxy.h"
#include "router/route.h"
#include "bclass/bclass.h"
#include "dkim/dkim.h"
#include "config/config.h"
#include "config/config_int.h"

#define KEY(n, t, f)    { n, t, OFF(f), 0, 0, NULL }
#define INT(n, f)       { n, CONFIG_INT, OFF(f), 1, 2147483647, NULL }
#define DUR(n, f, lo)   { n, CONFIG_DURATION, OFF(f), lo, 0, NULL }
#define SECTION(n, s)   { n, CONFIG_SECTION, 0, 0, 0, s }
#define END             { NULL, CONFIG_SECTION, 0, 0, 0, NULL }

static const struct config_key config_server[] = {
    KEY("hostname", CONFIG_HOSTNAME, hostname),
    KEY("listen", CONFIG_LISTEN, listen),
    KEY("workers", CONFIG_WORKERS, workers),
    KEY("user", CONFIG_STRING, user),
    KEY("group", CONFIG_STRING, group),
    KEY("pid_file", CONFIG_STRING, pid_file),
    KEY("control_socket", CONFIG_STRING, control_socket),
    DUR("shutdown_timeout", shutdown_timeout_ms, 0),
    KEY("admin_group", CONFIG_STRING, admin_group),
    KEY("sandbox", CONFIG_BOOL, sandbox),
    END
};

static const struct config_key config_limits_load[] = {
    KEY("queue_only", CONFIG_LOAD, load_queue_only_x100),
    KEY("refuse", CONFIG_LOAD, load_refuse_x100),
    KEY("file", CONFIG_STRING, load_file),
    END
};

/* limits.ban: errors from one address within window ban it for duration
 * (smtpd/session_ban.c; 0 errors: off) */
static const struct config_key config_limits_ban[] = {
    { "errors", CONFIG_INT, OFF(ban_errors), 0, 4000, NULL },
    DUR("window", ban_window_ms, 1000),
    DUR("duration", ban_duration_ms, 1000),
    END
};

static const struct config_key config_limits[] = {
    KEY("max_message_size", CONFIG_SIZE, max_message_size),
    INT("max_recipients", max_recipients),
    INT("max_connections", max_connections),
    INT("max_connections_per_ip", max_connections_per_ip),
    DUR("command_timeout", command_timeout_ms, 1),
    DUR("data_timeout", data_timeout_ms, 1),
    INT("max_errors", max_errors),
    KEY("bare_newline", CONFIG_BARE_NL, bare_newline_accept),
    { "ipv6_prefix", CONFIG_INT, OFF(ipv6_prefix), 1, 128, NULL },
    DUR("session_lifetime", session_lifetime_ms, 1),
    INT("max_junk_commands", max_junk_commands),
    { "max_transactions", CONFIG_INT, OFF(max_transactions), 0,
      2147483647, NULL },
    KEY("max_envelope_size", CONFIG_SIZE, max_envelope_size),
    SECTION("load", config_limits_load),
    SECTION("ban", config_limits_ban),
    END
};

/* screen: before the greeting (each listener's pregreet pause, and the
 * DNS lists asked during it; smtpd/session_screen.c) */
static const struct config_key config_screen[] = {
    KEY("dnsbl", CONFIG_DNSBL, screen_dnsbl),
    { "threshold", CONFIG_INT, OFF(screen_threshold), 1, 100000, NULL },
    DUR("timeout", screen_timeout_ms, 1),
    END
};

/* greylist: unauthenticated mail on role mx listeners, deferred at RCPT
 * until its triplet is delay old (smtpd/session_grey.c) */
static const struct config_key config_greylist[] = {
    KEY("enabled", CONFIG_BOOL, grey_enabled),
    DUR("delay", grey_delay_ms, 1000),
    DUR("expiry", grey_expiry_ms, 60000),
    DUR("pass_lifetime", grey_pass_lifetime_ms, 60000),
    { "ipv4_prefix", CONFIG_INT, OFF(grey_ipv4_prefix), 8, 32, NULL },
    { "ipv6_prefix", CONFIG_INT, OFF(grey_ipv6_prefix), 16, 128, NULL },
    KEY("allow_networks", CONFIG_GREY_NETS, grey_allow_networks),
    KEY("allow_sender_domains", CONFIG_DOMAINS, grey_allow_senders),
    KEY("allow_recipient_domains", CONFIG_DOMAINS, grey_allow_rcpts),
    KEY("dnswl_exempt", CONFIG_BOOL, grey_dnswl_exempt),
    END
};

/* quotas: per kind {messages, bytes} (0: none), the client network's
 * size.  A size of min -1 may be 0. */
#define QUOTA_KIND(name, i) \
static const struct config_key config_quota_##name[] = { \
    { "messages", CONFIG_INT, OFF(quota_msgs[i]), 0, 2147483647, NULL }, \
    { "bytes", CONFIG_SIZE, OFF(quota_bytes[i]), -1, 0, NULL }, \
    END \
}
QUOTA_KIND(sender, STATUS_QK_SENDER);
QUOTA_KIND(rcpt, STATUS_QK_RCPT);
QUOTA_KIND(user, STATUS_QK_USER);
QUOTA_KIND(net, STATUS_QK_NET);

static const struct config_key config_quotas[] = {
    SECTION("sender_domain", config_quota_sender),
    SECTION("recipient_domain", config_quota_rcpt),
    SECTION("user", config_quota_user),
    SECTION("network", config_quota_net),
    { "ipv4_prefix", CONFIG_INT, OFF(quota_ipv4_prefix), 8, 32, NULL },
    { "ipv6_prefix", CONFIG_INT, OFF(quota_ipv6_prefix), 16, 128, NULL },
    END
};

static const struct config_key config_relay[] = {
    KEY("allow_networks", CONFIG_CIDRS, allow_networks),
    END
};

static const struct config_key config_spool[] = {
    KEY("dir", CONFIG_STRING, spool_dir),
    KEY("fsync", CONFIG_BOOL, spool_fsync),
    KEY("reserve", CONFIG_SIZE, spool_reserve),
    END
};

static const struct config_key config_routes[] = {
    KEY("db", CONFIG_STRING, routes_db),
    KEY("default", CONFIG_ROUTE, routes_default),
    KEY("static", CONFIG_STATIC, static_routes),
    END
};

/* delivery.timeouts: the relay client's per-phase limits (RFC 5321
 * 4.5.3.2 minimums as defaults; names after Postfix's smtp_*_timeout) */
static const struct config_key config_timeouts[] = {
    DUR("greeting", mta_timeouts.greeting_ms, 1),
    DUR("helo", mta_timeouts.helo_ms, 1),
    DUR("mail", mta_timeouts.mail_ms, 1),
    DUR("rcpt", mta_timeouts.rcpt_ms, 1),
    DUR("data", mta_timeouts.data_ms, 1),
    DUR("data_xfer", mta_timeouts.data_xfer_ms, 1),
    DUR("data_done", mta_timeouts.data_done_ms, 1),
    DUR("quit", mta_timeouts.quit_ms, 1),
    END
};

/* delivery.mta_sts: MTA-STS (RFC 8461), tlspol/sts.c */
static const struct config_key config_mta_sts[] = {
    KEY("enabled", CONFIG_BOOL, mta_sts.enabled),
    DUR("fetch_timeout", mta_sts.fetch_timeout_ms, 1),
    { "port", CONFIG_INT, OFF(mta_sts.port), 1, 65535, NULL },
    END
};

static const struct config_key config_delivery[] = {
    { "retry", CONFIG_RETRY, OFF(retry_ms), 1, 0, NULL },  /* min 1 ms */
    DUR("max_queue_time", max_queue_time_ms, 1),
    DUR("delay_warning", delay_warning_ms, 0),
    INT("connections_per_destination", connections_per_destination),
    DUR("connect_timeout", connect_timeout_ms, 1),
    KEY("tls", CONFIG_TLSLEVEL, delivery_tls),
    KEY("bounce_classes", CONFIG_STRING, bounce_classes),
    /* fail-over (delivery/mta_health.c, deliver.c) */
    KEY("fallback_relay", CONFIG_FALLBACK, fallback_relay),
    { "fallback_after_attempts", CONFIG_INT, OFF(fallback_after_attempts),
        0, 1000, NULL },
    DUR("host_down_for", host_down_for_ms, 0),
    DUR("host_down_max", host_down_max_ms, 1000),
    SECTION("timeouts", config_timeouts),
    SECTION("mta_sts", config_mta_sts),
    END
};

static const struct config_key config_log[] = {
    KEY("file", CONFIG_STRING, log_file),
    KEY("level", CONFIG_LOGLEVEL, log_level),
    DUR("flush_interval", log_flush_interval_ms, 1),
    KEY("format", CONFIG_LOGFMT, log_format),
    END
};

static const struct config_key config_metrics[] = {
    KEY("listen", CONFIG_HOSTPORT, metrics_listen),
    KEY("allow_networks", CONFIG_METRICS_NETS, metrics_allow),
    { "max_connections_per_ip", CONFIG_INT, OFF(metrics_max_per_ip), 1,
        1024, NULL },
    DUR("header_timeout", metrics_header_timeout_ms, 1),
    END
};

static const struct config_key config_tlsrpt[] = {
    KEY("enabled", CONFIG_BOOL, tlsrpt_enabled),
    KEY("organization", CONFIG_STRING, tlsrpt_organization),
    KEY("contact", CONFIG_STRING, tlsrpt_contact),
    KEY("sender", CONFIG_STRING, tlsrpt_sender),
    END
};

static const struct config_key config_tls[] = {
    KEY("cert_file", CONFIG_TLSFILE, tls_cert_files),
    KEY("key_file", CONFIG_TLSFILE, tls_key_files),
    KEY("min_version", CONFIG_TLSVER, tls_min_version),
    KEY("ciphers", CONFIG_STRING, tls_ciphers),
    KEY("ca_file", CONFIG_STRING, tls_ca_file),
    END
};

static const struct config_key config_dns[] = {
    KEY("servers", CONFIG_DNSSERVERS, dns_servers),
    DUR("timeout", dns_timeout_ms, 1),
    { "attempts", CONFIG_INT, OFF(dns_attempts), 1, 10, NULL },
    DUR("min_ttl", dns_min_ttl_ms, 0),
    DUR("max_ttl", dns_max_ttl_ms, 1000),
    INT("cache_size", dns_cache_size),
    KEY("address_family", CONFIG_DNSFAMILY, dns_address_family),
    KEY("prefer", CONFIG_DNSFAMILY, dns_prefer),
    { "address_limit", CONFIG_INT, OFF(dns_address_limit), 1, 100, NULL },
    END
};

static const struct config_key config_dkim[] = {
    KEY("sign", CONFIG_DKIM_SIGN, dkim_sign),
    KEY("sign_networks", CONFIG_DKIM_NETS, dkim_sign_networks),
    END
};

static const struct config_key config_auth[] = {
    KEY("password_file", CONFIG_STRING, auth_password_file),
    KEY("allow_plaintext_loopback", CONFIG_BOOL,
        auth_allow_plaintext_loopback),
    { "max_failures", CONFIG_INT, OFF(auth_max_failures), 1, 1000, NULL },
    DUR("failure_delay", auth_failure_delay_ms, 0),
    DUR("failure_delay_max", auth_failure_delay_max_ms, 0),
    KEY("received_header", CONFIG_BOOL, auth_received_header),
    KEY("backend", CONFIG_STRING, auth_backend),
    KEY("dovecot_socket", CONFIG_STRING, auth_dovecot_socket),
    DUR("dovecot_timeout", auth_dovecot_timeout_ms, 100),
    END
};

static const struct config_key config_submission[] = {
    KEY("sender_login_match", CONFIG_BOOL, submission_sender_login_match),
    END
};

/* egress: where mail leaves from (config_egress.c, delivery/mta_egress.c) */
static const struct config_key config_egress[] = {
    KEY("sources", CONFIG_EGRESS_SOURCES, egress_sources),
    KEY("pools", CONFIG_EGRESS_POOLS, egress_pools),
    KEY("default_pool", CONFIG_STRING, egress_default_pool),
    DUR("recheck_interval", egress_recheck_ms, 1000),
    END
};

/* events: delivery events (config_events.c, events/events.h) */
static const struct config_key config_events_http[] = {
    KEY("url", CONFIG_EVURL, events_http_url),
    KEY("secret_file", CONFIG_STRING, events_http_secret_file),
    DUR("timeout", events_http_timeout_ms, 1),
    END
};

static const struct config_key config_events_redis[] = {
    KEY("address", CONFIG_EVADDR, events_redis_address),
    KEY("stream", CONFIG_STRING, events_redis_stream),
    { "maxlen", CONFIG_INT, OFF(events_redis_maxlen), 0, 2147483647, NULL },
    KEY("password_file", CONFIG_STRING, events_redis_password_file),
    END
};

static const struct config_key config_events[] = {
    KEY("types", CONFIG_EVTYPES, events_types),
    KEY("headers", CONFIG_EVHEADERS, events_headers),
    KEY("max_backlog", CONFIG_SIZE, events_max_backlog),
    KEY("when_full", CONFIG_EVFULL, events_when_full),
    { "batch", CONFIG_INT, OFF(events_batch), 1, 10000, NULL },
    SECTION("http", config_events_http),
    SECTION("redis", config_events_redis),
    END
};

/* cluster: limits shared through Redis (config_cluster.c, cluster/) */
static const struct config_key config_cluster_sentinel[] = {
    KEY("addresses", CONFIG_CLADDRS, cluster_sentinel),
    KEY("master_name", CONFIG_STRING, cluster_sentinel_master),
    END
};

static const struct config_key config_cluster[] = {
    KEY("redis", CONFIG_CLADDRS, cluster_redis),
    KEY("tls", CONFIG_BOOL, cluster_tls),
    KEY("ca_file", CONFIG_STRING, cluster_tls_ca_file),
    KEY("user", CONFIG_STRING, cluster_user),
    KEY("password_file", CONFIG_STRING, cluster_password_file),
    KEY("key_prefix", CONFIG_STRING, cluster_key_prefix),
    KEY("node_id", CONFIG_STRING, cluster_node_id),
    DUR("timeout", cluster_timeout_ms, 10),
    DUR("sync_interval", cluster_sync_ms, 10),
    SECTION("sentinel", config_cluster_sentinel),
    END
};

const struct config_key config_top[] = {
    SECTION("server", config_server),
    SECTION("limits", config_limits),
    SECTION("screen", config_screen),
    SECTION("greylist", config_greylist),
    SECTION("quotas", config_quotas),
    SECTION("relay", config_relay),
    SECTION("spool", config_spool),
    SECTION("routes", config_routes),
    SECTION("delivery", config_delivery),
    SECTION("egress", config_egress),
    SECTION("log", config_log),
    SECTION("tls", config_tls),
    SECTION("dns", config_dns),
    SECTION("dkim", config_dkim),
    SECTION("metrics", config_metrics),
    SECTION("tlsrpt", config_tlsrpt),
    SECTION("auth", config_auth),
    SECTION("events", config_events),
    SECTION("submission", config_submission),
    SECTION("cluster", config_cluster),
    /* traffic shaping: the shape module reads this section (shape.h) */
    { "shaping", CONFIG_OPAQUE, 0, 0, 0, NULL },
    END
};


static void config_section(struct config_parse *, const struct config_key *,
    yaml_node_t *, const char *);

static void
config_value(struct config_parse *p, const struct config_key *k,
    yaml_node_t *n, const char *path)
{
    switch (k->type) {
    case CONFIG_SECTION:
        config_section(p, k->sub, n, path);
        break;
    case CONFIG_LISTEN:
        config_set_listen(p, n, path);
        break;
    case CONFIG_CIDRS:
        config_set_cidrs(p, n, path);
        break;
    case CONFIG_DKIM_NETS:
        (void)config_parse_cidrs(p, n, path, &p->cfg->dkim_sign_networks,
            &p->cfg->ndkim_sign_networks);
        p->dkim_nets_set = 1;
        break;
    case CONFIG_METRICS_NETS:
        (void)config_parse_cidrs(p, n, path, &p->cfg->metrics_allow,
            &p->cfg->nmetrics_allow);
        break;
    case CONFIG_DKIM_SIGN:
        config_set_dkim(p, n, path);
        break;
    case CONFIG_DNSBL:
        config_set_dnsbl(p, n, path);
        break;
    case CONFIG_EGRESS_SOURCES:
        config_set_egress_sources(p, n, path);
        break;
    case CONFIG_EGRESS_POOLS:
        config_set_egress_pools(p, n, path);
        break;
    case CONFIG_GREY_NETS:
        (void)config_parse_cidrs(p, n, path, &p->cfg->grey_allow_networks,
            &p->cfg->ngrey_allow_networks);
        break;
    case CONFIG_DOMAINS:
        config_set_domains(p, k, n, path);
        break;
    case CONFIG_EVTYPES:
    case CONFIG_EVFULL:
    case CONFIG_EVURL:
    case CONFIG_EVHEADERS:
    case CONFIG_EVADDR:
        config_set_events(p, k, n, path);
        break;
    case CONFIG_CLADDRS:
        config_set_cluster_addrs(p, k, n, path);
        break;
    case CONFIG_RETRY:
        config_set_retry(p, k, n, path);
        break;
    case CONFIG_STATIC:
        config_set_static(p, n, path);
        break;
    case CONFIG_DNSSERVERS:
        config_set_dns_servers(p, n, path);
        break;
    case CONFIG_OPAQUE:
        break;
    default:
        config_set_scalar_kind(p, k, n, path);
        break;
    }
}

/* "hostname, listen, workers" for unknown-key messages. */
static void
config_key_list(const struct config_key *keys, char *buf, size_t bufsz)
{
    size_t o = 0;

    buf[0] = '\0';
    for (; keys->name != NULL; keys++) {
        int n = snprintf(buf + o, bufsz - o, "%s%s", o ? ", " : "",
            keys->name);

        if (n < 0 || (size_t)n >= bufsz - o)
            break;
        o += (size_t)n;
    }
}

/* config_note_given - path was set by the file (for config_show). */
static void
config_note_given(struct config *cfg, const char *path)
{
    size_t have = cfg->given ? strlen(cfg->given) : 1, n = strlen(path);

    cfg->given = xrealloc(cfg->given, have + n + 2);
    if (have == 1)
        cfg->given[0] = '\n';
    memcpy(cfg->given + have, path, n);
    memcpy(cfg->given + have + n, "\n", 2);
}

/*
 * Walk one mapping against its key table.  parent is the dotted path of
 * the mapping ("" at the top).
 */
static void
config_section(struct config_parse *p, const struct config_key *keys,
    yaml_node_t *n, const char *parent)
{
    yaml_node_pair_t *pair, *prev;
    char path[CONFIG_PATH_MAX], list[400], what[440];
    char show[CONFIG_SHOW_MAX + 8];
    const struct config_key *k;

    if (config_is_null(n))
        return;                 /* "limits:" with every key commented out */
    if (n->type != YAML_MAPPING_NODE) {
        config_key_list(keys, list, sizeof(list));
        (void)snprintf(what, sizeof(what), "a mapping of keys (%s)", list);
        config_expected(p, n, parent[0] ? parent : "top level", what);
        return;
    }
    for (pair = n->data.mapping.pairs.start;
        pair < n->data.mapping.pairs.top; pair++) {
        yaml_node_t *kn = yaml_document_get_node(p->doc, pair->key);
        yaml_node_t *vn = yaml_document_get_node(p->doc, pair->value);
        const char *name;

        name = config_scalar(p, kn, parent[0] ? parent : "top level",
            "a key name");
        if (name == NULL)
            continue;
        config_path(path, sizeof(path), parent, name);
        for (prev = n->data.mapping.pairs.start; prev < pair; prev++) {
            yaml_node_t *pk = yaml_document_get_node(p->doc, prev->key);

            if (pk->type == YAML_SCALAR_NODE &&
                strcmp((const char *)pk->data.scalar.value, name) == 0)
                break;
        }
        if (prev < pair) {
            yaml_node_t *pk = yaml_document_get_node(p->doc, prev->key);

            config_addf(p, &kn->start_mark, "%s: duplicate key (first at "
                "line %zu)", path, pk->start_mark.line + 1);
            continue;
        }
        for (k = keys; k->name != NULL; k++)
            if (strcmp(k->name, name) == 0)
                break;
        if (k->name == NULL) {
            config_key_list(keys, list, sizeof(list));
            config_addf(p, &kn->start_mark, "%s: unknown key %s (expected "
                "one of: %s)", path, config_found(kn, show, sizeof(show)),
                list);
            continue;
        }
        if (k->type != CONFIG_SECTION && k->type != CONFIG_OPAQUE)
            config_note_given(p->cfg, path);
        if (k->sub == config_routes)
            p->routes_mark = kn->start_mark;
        if (k->off == OFF(tls_ciphers) && keys == config_tls)
            p->tls_ciphers_mark = vn->start_mark;
        if (k->off == OFF(tls_ca_file) && keys == config_tls)
            p->tls_ca_mark = vn->start_mark;
        if (k->off == OFF(auth_password_file) && keys == config_auth) {
            p->pwfile_mark = vn->start_mark;
            p->have_pwfile_mark = 1;
        }
        if (k->off == OFF(bounce_classes) && keys == config_delivery) {
            p->bclass_mark = vn->start_mark;
            p->have_bclass_mark = 1;
        }
        if (keys == config_egress && k->off == OFF(egress_default_pool)) {
            p->egress_default_mark = vn->start_mark;
            p->have_egress_default_mark = 1;
        }
        if (keys == config_auth && (k->off == OFF(auth_backend) ||
            k->off == OFF(auth_dovecot_socket)))
            config_auth_mark(p, k->off == OFF(auth_backend), vn);
        if (k->sub == config_cluster && !p->have_cluster_mark) {
            p->cluster_mark = kn->start_mark;
            p->have_cluster_mark = 1;
        }
        if (keys == config_cluster && k->off == OFF(cluster_password_file)) {
            p->cluster_pw_mark = vn->start_mark;
            p->have_cluster_pw_mark = 1;
        }
        if (k->off == OFF(log_file) && keys == config_log) {
            p->logfile_mark = vn->start_mark;
            p->have_logfile_mark = 1;
        }
        if (keys == config_dns && (k->off == OFF(dns_min_ttl_ms) ||
            (k->off == OFF(dns_max_ttl_ms) && !p->have_dns_ttl_mark))) {
            p->dns_ttl_mark = vn->start_mark;
            p->have_dns_ttl_mark = 1;
        }
        config_value(p, k, vn, path);
    }
}

/* Every default, before the file is read. */
static struct config *
config_defaults(const char *path)
{
    static const char *const nets[] = { "127.0.0.0/8", "::1/128" };
    static const uint64_t retry[] = {
        60000, 300000, 900000, 3600000, 14400000
    };
    struct config *cfg = xcalloc(1, sizeof(*cfg));
    size_t i;

    cfg->path = xstrdup(path);
    cfg->listen = xcalloc(1, sizeof(*cfg->listen));
    cfg->listen[0].spec = xstrdup("127.0.0.1:2525");
    (void)util_parse_hostport(cfg->listen[0].spec, &cfg->listen[0].addr,
        &cfg->listen[0].addrlen);
    cfg->nlisten = 1;
    cfg->workers = config_ncpu();
    cfg->user = xstrdup("mtad");
    cfg->group = xstrdup("mtad");
    cfg->pid_file = xstrdup("/run/mtad/mtad.pid");
    cfg->control_socket = xstrdup("/run/mtad/control.sock");
    cfg->sandbox = true;
    cfg->shutdown_timeout_ms = 30 * 1000;

    cfg->max_message_size = 50 * 1024 * 1024;
    cfg->max_recipients = 1000;
    cfg->max_connections = 10000;
    cfg->max_connections_per_ip = 100;
    cfg->command_timeout_ms = 5 * 60 * 1000;
    cfg->data_timeout_ms = 10 * 60 * 1000;
    cfg->max_errors = 20;
    cfg->auth_max_failures = 5;
    cfg->auth_failure_delay_ms = 1000;
    cfg->auth_failure_delay_max_ms = 8000;
    cfg->auth_dovecot_timeout_ms = 10000;
    cfg->bare_newline_accept = false;
    cfg->ipv6_prefix = 64;
    cfg->ban_window_ms = 600000;
    cfg->ban_duration_ms = 3600000;
    cfg->session_lifetime_ms = 60 * 60 * 1000;
    cfg->max_junk_commands = 100;
    cfg->max_transactions = 0;       /* none */
    cfg->max_envelope_size = 256 * 1024;
    cfg->screen_threshold = 1;
    cfg->egress_recheck_ms = 60000;
    cfg->screen_timeout_ms = 2000;
    cfg->grey_delay_ms = 5 * 60 * 1000;
    cfg->grey_expiry_ms = 24 * 60 * 60 * 1000;
    cfg->grey_pass_lifetime_ms = (uint64_t)36 * 24 * 60 * 60 * 1000;
    cfg->grey_ipv4_prefix = 24;
    cfg->grey_ipv6_prefix = 64;
    cfg->grey_dnswl_exempt = true;
    cfg->quota_ipv4_prefix = 24;
    cfg->quota_ipv6_prefix = 64;
    cfg->events_types = (1u << CONFIG_EVENT_NTYPES) - 1;
    cfg->events_max_backlog = (uint64_t)1 << 30;
    cfg->events_batch = 500;
    cfg->events_http_timeout_ms = 10000;
    cfg->events_redis_maxlen = 1000000;
    cfg->events_redis_stream = xstrdup("mtad:events");
    cfg->cluster_key_prefix = xstrdup("mtad:");
    cfg->cluster_timeout_ms = 1000;
    cfg->cluster_sync_ms = 100;

    cfg->nallow_networks = ARRAY_LEN(nets);
    cfg->allow_networks = xcalloc(ARRAY_LEN(nets), sizeof(struct cidr));
    for (i = 0; i < ARRAY_LEN(nets); i++)
        (void)util_parse_cidr(nets[i], &cfg->allow_networks[i]);
    cfg->nmetrics_allow = ARRAY_LEN(nets);      /* loopback, as relay's */
    cfg->metrics_allow = xcalloc(ARRAY_LEN(nets), sizeof(struct cidr));
    memcpy(cfg->metrics_allow, cfg->allow_networks,
        ARRAY_LEN(nets) * sizeof(struct cidr));
    cfg->metrics_max_per_ip = 4;
    cfg->metrics_header_timeout_ms = 2000;

    cfg->spool_dir = xstrdup("/run/mtad/spool");
    cfg->spool_fsync = false;
    cfg->spool_reserve = 4 * 1024 * 1024;
    cfg->routes_db = xstrdup("/var/lib/mtad/routes.mdb");

    cfg->nretry = ARRAY_LEN(retry);
    cfg->retry_ms = xcalloc(ARRAY_LEN(retry), sizeof(uint64_t));
    memcpy(cfg->retry_ms, retry, sizeof(retry));
    cfg->max_queue_time_ms = (uint64_t)5 * 24 * 60 * 60 * 1000;
    cfg->delay_warning_ms = (uint64_t)4 * 60 * 60 * 1000;
    cfg->connections_per_destination = 20;
    cfg->connect_timeout_ms = 30 * 1000;
    cfg->host_down_for_ms = 60 * 1000;
    cfg->host_down_max_ms = 60 * 60 * 1000;
    cfg->mta_sts.enabled = 1;
    cfg->mta_sts.fetch_timeout_ms = 10 * 1000;
    cfg->mta_sts.port = 443;
    cfg->delivery_tls = 1;              /* may */
    cfg->mta_timeouts.greeting_ms = 5 * 60 * 1000;
    cfg->mta_timeouts.helo_ms = 5 * 60 * 1000;
    cfg->mta_timeouts.mail_ms = 5 * 60 * 1000;
    cfg->mta_timeouts.rcpt_ms = 5 * 60 * 1000;
    cfg->mta_timeouts.data_ms = 2 * 60 * 1000;
    cfg->mta_timeouts.data_xfer_ms = 3 * 60 * 1000;
    cfg->mta_timeouts.data_done_ms = 10 * 60 * 1000;
    cfg->mta_timeouts.quit_ms = 5 * 60 * 1000;

    cfg->log_file = xstrdup("-");
    cfg->log_level = LOGL_INFO;
    cfg->log_flush_interval_ms = 100;
    cfg->log_format = LOG_FORMAT_TEXT;
    cfg->load_file = xstrdup("/proc/loadavg");

    cfg->tls_min_version = CONFIG_TLS12;

    cfg->dns_timeout_ms = 5000;
    cfg->dns_attempts = 2;
    cfg->dns_min_ttl_ms = 0;
    cfg->dns_max_ttl_ms = (uint64_t)24 * 60 * 60 * 1000;
    cfg->dns_cache_size = 10000;
    cfg->dns_address_family = CONFIG_DNS_BOTH;
    cfg->dns_prefer = CONFIG_DNS_IPV4;
    cfg->dns_address_limit = 5;
    return cfg;
}


static void
config_yaml_error(struct config_parse *p, const yaml_parser_t *y)
{
    const char *problem = y->problem ? y->problem : "unknown error";

    switch (y->error) {
    case YAML_MEMORY_ERROR:
        config_addf(p, NULL, "out of memory");
        break;
    case YAML_READER_ERROR:
        config_addf(p, NULL, "syntax error: %s at byte %zu", problem,
            y->problem_offset);
        break;
    default:
        if (y->context != NULL)
            config_addf(p, &y->problem_mark, "syntax error: %s %s at "
                "line %zu column %zu", problem, y->context,
                y->context_mark.line + 1, y->context_mark.column + 1);
        else
            config_addf(p, &y->problem_mark, "syntax error: %s", problem);
        break;
    }
}

/*
 * Copy the messages into err.  When they do not all fit, keep whole lines
 * and end with "FILE: and N more errors"; a first line too long for err on
 * its own is cut rather than lost.
 */
static void
config_copy_errors(const struct config_parse *p, char *err, size_t errsz)
{
    const char *s = p->errs, *nl;
    size_t o = 0, reserve;
    int shown = 0, n;

    if (err == NULL || errsz == 0)
        return;
    err[0] = '\0';
    if (s == NULL)
        return;
    if (p->errlen < errsz) {
        memcpy(err, s, p->errlen + 1);
        return;
    }
    reserve = strlen(p->file) + 40;
    while (*s != '\0') {
        size_t len;

        nl = strchr(s, '\n');
        len = nl ? (size_t)(nl - s) : strlen(s);
        if (o + 1 + len + reserve >= errsz)
            break;
        if (o)
            err[o++] = '\n';
        memcpy(err + o, s, len);
        o += len;
        err[o] = '\0';
        shown++;
        s += len + (nl ? 1 : 0);
    }
    if (shown == 0) {
        nl = strchr(s, '\n');
        o = (nl ? (size_t)(nl - s) : strlen(s)) + 1;
        util_strlcpy(err, s, o < errsz ? o : errsz);
        o = strlen(err);
        shown = 1;
    }
    n = snprintf(err + o, errsz - o, "\n%s: and %d more errors", p->file,
        p->nerr - shown);
    if (n < 0 || (size_t)n >= errsz - o)
        err[o] = '\0';             /* no room for a whole tail line */
}

/* Parse the open file into p: YAML errors, then every key's problems. */
static void
config_parse_file(struct config_parse *p, FILE *fp)
{
    yaml_parser_t y;
    yaml_document_t doc, extra;
    yaml_node_t *root;

    if (!yaml_parser_initialize(&y)) {
        config_addf(p, NULL, "out of memory");
        return;
    }
    yaml_parser_set_input_file(&y, fp);
    /* On failure libyaml has already freed the document. */
    if (!yaml_parser_load(&y, &doc)) {
        config_yaml_error(p, &y);
        yaml_parser_delete(&y);
        return;
    }
    p->doc = &doc;
    root = yaml_document_get_root_node(&doc);
    if (root != NULL) {
        p->routes_mark = root->start_mark;
        config_section(p, config_top, root, "");
    }
    if (root == NULL || root->type == YAML_MAPPING_NODE ||
        config_is_null(root))
        if (!p->have_default)
            config_addf(p, &p->routes_mark, "routes.default: required key is "
                "missing (the route for mail that matches no other key)");

    /* A second document would be silently ignored: refuse it. */
    if (!yaml_parser_load(&y, &extra))
        config_yaml_error(p, &y);
    else {
        if (yaml_document_get_root_node(&extra) != NULL)
            config_addf(p, &extra.start_mark, "top level: expected one YAML "
                "document, found a second one");
        yaml_document_delete(&extra);
    }
    p->doc = NULL;
    yaml_document_delete(&doc);
    yaml_parser_delete(&y);
}


struct config *
config_load(const char *path, char *err, size_t errsz)
{
    struct config_parse p;
    struct stat st;
    FILE *fp;

    memset(&p, 0, sizeof(p));
    p.file = path;
    if (err != NULL && errsz > 0)
        err[0] = '\0';

    fp = fopen(path, "rb");
    if (fp == NULL || fstat(fileno(fp), &st) != 0 || !S_ISREG(st.st_mode)) {
        int e = fp == NULL ? errno : S_ISDIR(st.st_mode) ? EISDIR : EINVAL;

        config_addf(&p, NULL, "cannot open: %s", strerror(e));
        if (fp != NULL)
            fclose(fp);
        config_copy_errors(&p, err, errsz);
        free(p.errs);
        return NULL;
    }
    p.cfg = config_defaults(path);
    config_parse_file(&p, fp);
    fclose(fp);
    config_check_tls(&p);
    config_check_events(&p);
    config_check_cluster(&p);
    config_check_auth(&p);
    config_check_logfile(&p);
    config_check_tlsrpt(&p);
    config_load_bclass(&p);
    config_dkim_default_nets(&p);
    config_check_egress(&p);
    if (p.cfg->dns_min_ttl_ms > p.cfg->dns_max_ttl_ms)
        config_addf(&p, p.have_dns_ttl_mark ? &p.dns_ttl_mark : NULL,
            "dns.min_ttl: must not be above dns.max_ttl (%llus > %llus)",
            (unsigned long long)(p.cfg->dns_min_ttl_ms / 1000),
            (unsigned long long)(p.cfg->dns_max_ttl_ms / 1000));
    if (p.nerr > 0) {
        config_copy_errors(&p, err, errsz);
        free(p.errs);
        config_free(p.cfg);
        return NULL;
    }
    config_default_hostname(p.cfg);
    config_tlsrpt_defaults(p.cfg);
    return p.cfg;
}

void
config_free(struct config *cfg)
{
    size_t i;

    if (cfg == NULL)
        return;
    free(cfg->path);
    free(cfg->given);
    free(cfg->hostname);
    for (i = 0; i < cfg->nlisten; i++)
        config_listen_free(&cfg->listen[i]);
    free(cfg->listen);
    free(cfg->user);
    free(cfg->group);
    free(cfg->pid_file);
    free(cfg->control_socket);
    free(cfg->admin_group);
    free(cfg->allow_networks);
    free(cfg->spool_dir);
    free(cfg->routes_db);
    free(cfg->routes_default);
    free(cfg->fallback_relay);
    for (i = 0; i < cfg->nstatic_routes; i++) {
        free(cfg->static_routes[i].key);
        free(cfg->static_routes[i].route);
    }
    free(cfg->static_routes);
    free(cfg->retry_ms);
    free(cfg->log_file);
    for (i = 0; i < CONFIG_TLS_MAX_CERTS; i++) {
        free(cfg->tls_cert_files[i]);
        free(cfg->tls_key_files[i]);
    }
    free(cfg->tls_ciphers);
    free(cfg->tls_ca_file);
    config_free_dkim(cfg->dkim_sign, cfg->ndkim_sign);
    config_free_dnsbl(cfg->screen_dnsbl, cfg->nscreen_dnsbl);
    config_free_egress(cfg);
    free(cfg->grey_allow_networks);
    config_free_domains(&cfg->grey_allow_senders);
    config_free_domains(&cfg->grey_allow_rcpts);
    free(cfg->dkim_sign_networks);
    free(cfg->dns_servers);
    free(cfg->load_file);
    free(cfg->metrics_listen);
    free(cfg->metrics_allow);
    free(cfg->tlsrpt_organization);
    free(cfg->tlsrpt_contact);
    free(cfg->tlsrpt_sender);
    free(cfg->events_headers);
    free(cfg->events_http_url);
    free(cfg->events_http_secret_file);
    free(cfg->events_redis_address);
    free(cfg->events_redis_stream);
    free(cfg->events_redis_password_file);
    free(cfg->cluster_redis);
    free(cfg->cluster_tls_ca_file);
    free(cfg->cluster_user);
    free(cfg->cluster_password_file);
    free(cfg->cluster_key_prefix);
    free(cfg->cluster_node_id);
    free(cfg->cluster_sentinel);
    free(cfg->cluster_sentinel_master);
    free(cfg->auth_password_file);
    free(cfg->bounce_classes);
    bclass_free(cfg->bclass);
    free(cfg->auth_backend);
    free(cfg->auth_dovecot_socket);
    free(cfg);
}
