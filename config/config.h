/*
 * config.h - relay.yaml, loaded with libyaml into one immutable struct.
 *
 * CONTRACT  config_load() returns a fully checked config with every default
 *           filled in, or NULL and an error text with one line per problem,
 *           each "FILE:LINE:COL: KEY: message" (e.g. "relay.yaml:7:22:
 *           limits.max_message_size: expected a size like 50M, got '5X'").
 *           The struct is read-only after load; reload builds a new one.
 *           Strings and arrays are owned by the config; config_free() frees
 *           them all.
 * FAILURE   Never logs.
 */
#ifndef MTAD_CONFIG_H
#define MTAD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>

#include "common/util.h"
#include "router/router.h"

struct bclass_rules;

/* A server.listen entry: "host:port", or the mapping form
 * {address, proxy_protocol, proxy_from, role, tls, pregreet,
 * pregreet_multiline, dnsbl, milters}. */
/* One of a listener's milters (config_milter.c): socket is
 * "inet:IP:port"; proto_off the SMFIP_NO* steps never sent. */
struct config_milter {
    char                    *name;
    char                    *socket;
    uint64_t                 connect_ms, command_ms, eom_ms;
    int                      default_accept;   /* 0: tempfail */
    uint32_t                 proto_off;
};

struct config_listen {
    char                    *spec;  /* as written: "127.0.0.1:2525" */
    struct sockaddr_storage  addr;
    socklen_t                addrlen;
    unsigned                 proxy; /* PROXY_V1|PROXY_V2 mask; 0 = none */
    struct cidr             *proxy_from;  /* peers allowed to send it */
    size_t                   nproxy_from;
    int                      role;  /* CONFIG_ROLE_MX (default) or _SUBMISSION */
    int                      tls_implicit; /* tls: implicit (RFC 8314) */
    /* The screen before the greeting (role mx in clear text only): a
     * client that talks before its 220 is refused. */
    uint64_t                 pregreet_ms;  /* pause before the 220; 0 none */
    int                      pregreet_multiline; /* "220-" at once, "220 "
                                               after the pause */
    int                      no_dnsbl;     /* dnsbl: false (screen.dnsbl
                                               not asked here) */
    int                      no_greylist;  /* greylist: false (not
                                               greylisted here) */
    struct config_milter    *milters;      /* content filters, in order */
    size_t                   nmilters;
};

/* A list of domains (greylist.allow_*_domains): lower case, no final dot;
 * each matches itself and the names below it. */
struct config_domains {
    char  **v;
    size_t  n;
};

/* One screen.dnsbl entry: a DNS list and what its answers are worth. */
struct dns_rbl_filter;
struct config_dnsbl {
    char                    *zone;          /* lower case, no final dot */
    int                      weight;        /* < 0: an allowlist (DNSWL) */
    char                    *match;         /* as written; NULL: any A */
    struct dns_rbl_filter   *filter;        /* parsed match; NULL: any */
};
#define CONFIG_DNSBL_MAX    32

/* config_listen.role: mx takes mail for the routes (relay by network);
 * submission requires AUTH before MAIL (and TLS before AUTH). */
#define CONFIG_ROLE_MX          0
#define CONFIG_ROLE_SUBMISSION  1

/* One dkim.sign entry; checked at load (the key file readable, a private
 * key of the algorithm's type), loaded again by each worker before it
 * drops its privileges. */
struct config_dkim_key {
    char   *domain;                 /* signing domain (d=), lower case */
    char   *selector;               /* s= */
    char   *key_file;               /* PEM private key */
    int     algorithm;              /* enum dkim_alg (dkim/dkim.h) */
};

#define CONFIG_TLS_MAX_CERTS 4     /* tls.cert_file entries */
#define CONFIG_QUOTA_KINDS   4     /* quotas: as STATUS_QK_MAX */

/* egress (config_egress.c): local addresses mail leaves from, each with
 * its EHLO name, and weighted pools of them.  No section: none of either
 * (delivery binds nothing and says server.hostname). */
#define CONFIG_EGRESS_MAX 64       /* sources, and pools */
struct config_egress_source {
    char   *name;                   /* route_pool_name_ok() */
    char   *address;                /* as written */
    struct sockaddr_storage addr;   /* port 0 */
    socklen_t addrlen;
    char   *ehlo;                   /* its EHLO name (the address's PTR) */
    int     line, col;              /* where it was written */
};
struct config_egress_member {
    char   *name;                   /* as written */
    size_t  source;                 /* index into egress_sources */
    unsigned weight;                /* 1..1000 */
    int     line, col;
};
struct config_egress_pool {
    char   *name;
    struct config_egress_member *m;
    size_t  nm;
    int     idx;                    /* its place in egress.pools */
    int     line, col;
};

/* auth.failure_delay_max may not exceed 5 minutes: a client waits that
 * long for a reply (RFC 5321 4.5.3.2) before it gives up. */
#define CONFIG_AUTH_DELAY_LIMIT_MS  (5 * 60 * 1000)

struct config {
    char   *path;                   /* the file it came from */
    char   *given;                  /* "\nserver.listen\nlog.level\n...":
                                       the keys the file set (config_show) */

    /* server */
    char   *hostname;               /* default gethostname() */
    struct config_listen *listen;
    size_t  nlisten;
    int     workers;                /* "auto" -> number of CPUs */
    char   *user;                   /* default "mtad" */
    char   *group;                  /* default "mtad" */
    char   *pid_file;               /* default /run/mtad/mtad.pid */
    char   *control_socket;         /* default /run/mtad/control.sock */
    char   *admin_group;            /* may use the control socket besides
                                       root; NULL = root only */
    bool    sandbox;                /* server.sandbox: seccomp + Landlock,
                                       default true */
    uint64_t shutdown_timeout_ms;   /* server.shutdown_timeout, default 30s:
                                       how long old workers finish sessions */

    /* limits */
    uint64_t max_message_size;      /* bytes, default 50M */
    int     max_recipients;         /* 1000 */
    int     max_connections;        /* 10000, per mtad (shared by workers) */
    int     max_connections_per_ip; /* 100 */
    uint64_t command_timeout_ms;    /* 5m */
    uint64_t data_timeout_ms;       /* 10m */
    int     max_errors;             /* 20 */
    bool    bare_newline_accept;    /* limits.bare_newline: reject|accept */
    int     ipv6_prefix;            /* 64: IPv6 clients per /N for _per_ip */
    uint64_t session_lifetime_ms;   /* 1h: a session's maximum age */
    int     max_junk_commands;      /* 100: NOOP/RSET/VRFY/HELP per message */
    int     max_transactions;       /* 0 (none): MAIL commands per session;
                                       EHLO LIMITS MAILMAX (RFC 9422) */
    uint64_t max_envelope_size;     /* 256K: sender + recipients, bytes */
    /* limits.ban: 5xx replies from one address (its /ipv6_prefix) within
     * window ban it for duration, node-wide; 0 errors = off */
    int     ban_errors;
    uint64_t ban_window_ms;         /* 10m */
    uint64_t ban_duration_ms;       /* 1h */
    /* limits.load: the master's load policy (master/load.c); 1-minute load
     * average * 100, 0 = off */
    uint32_t load_queue_only_x100;  /* hold deliveries while at or over */
    uint32_t load_refuse_x100;      /* 421 to new connections while over */
    char   *load_file;              /* default /proc/loadavg */

    /* relay */
    struct cidr *allow_networks;    /* default 127.0.0.0/8, ::1/128 */
    size_t  nallow_networks;

    /* spool */
    char   *spool_dir;              /* default /run/mtad/spool */
    bool    spool_fsync;            /* default false */
    uint64_t spool_reserve;         /* bytes kept free for the delivery
                                       state and bounces of accepted mail:
                                       below it new mail gets 452; 4M */

    /* routes */
    char   *routes_db;              /* default /var/lib/mtad/routes.mdb */
    char   *routes_default;         /* required */
    struct router_static *static_routes;
    size_t  nstatic_routes;

    /* delivery */
    uint64_t *retry_ms;             /* default 1m,5m,15m,1h,4h */
    size_t  nretry;
    uint64_t max_queue_time_ms;     /* 5d */
    uint64_t delay_warning_ms;      /* 4h; 0: no NOTIFY=DELAY warnings */
    int     connections_per_destination; /* 20 */
    uint64_t connect_timeout_ms;    /* 30s */
    char   *fallback_relay;         /* smtp: hosts for every SMTP route
                                       without its own fallback=; NULL */
    int     fallback_after_attempts; /* 0: the fallback joins in the
                                       attempt whose direct hosts failed;
                                       N: from the N-th attempt on */
    uint64_t host_down_for_ms;      /* 60s: a hop that does not answer is
                                       skipped that long (0: never) */
    uint64_t host_down_max_ms;      /* 1h: the cap of its growth */
    int     delivery_tls;           /* delivery.tls: outbound STARTTLS level,
                                       a router_tls_level() index (enum
                                       tls_level); default 1, "may" */
    struct config_mta_timeouts {    /* delivery.timeouts, RFC 5321 4.5.3.2 */
        uint64_t greeting_ms;       /* 5m: the 220 greeting */
        uint64_t helo_ms;           /* 5m: EHLO/HELO (and RSET) */
        uint64_t mail_ms;           /* 5m: MAIL */
        uint64_t rcpt_ms;           /* 5m: each RCPT */
        uint64_t data_ms;           /* 2m: the 354 to DATA */
        uint64_t data_xfer_ms;      /* 3m: each block of the body */
        uint64_t data_done_ms;      /* 10m: the reply after the dot */
        uint64_t quit_ms;           /* 5m: the reply to QUIT */
    } mta_timeouts;
    char   *bounce_classes;         /* delivery.bounce_classes: the
                                       operator's rules file (bclass.h);
                                       NULL: the built-in rules alone */
    struct bclass_rules *bclass;    /* loaded at config_load(): that
                                       file's rules, then the built-in
                                       ones; never NULL in a loaded config */
    struct config_mta_sts {         /* delivery.mta_sts, RFC 8461 */
        int      enabled;           /* true: look up and apply policies */
        uint64_t fetch_timeout_ms;  /* 10s: the whole HTTPS fetch */
        int      port;              /* 443; another port only for tests */
    } mta_sts;

    /* log */
    char   *log_file;               /* "-" = stderr */
    int     log_level;              /* enum log_level, default info */
    uint64_t log_flush_interval_ms; /* 100ms */
    int     log_format;             /* log.format: LOG_FORMAT_TEXT|JSON */

    /* tlsrpt: SMTP TLS Reporting, RFC 8460 (tlspol/tlspol.h) */
    int     tlsrpt_enabled;         /* count outcomes, mail daily reports */
    char   *tlsrpt_organization;    /* organization-name; default hostname */
    char   *tlsrpt_contact;         /* contact-info; postmaster@hostname */
    char   *tlsrpt_sender;          /* From: and MAIL FROM of the reports;
                                       default postmaster@hostname */

    /* metrics: Prometheus exposition over HTTP (master/metrics.c) */
    char   *metrics_listen;         /* NULL = off (the default) */
    struct sockaddr_storage metrics_addr;
    socklen_t metrics_addrlen;
    struct cidr *metrics_allow;     /* clients served; default loopback */
    size_t  nmetrics_allow;
    int     metrics_max_per_ip;     /* open connections per address, 4 */
    uint64_t metrics_header_timeout_ms; /* the request, complete: 2s */

    /* tls: inbound STARTTLS, offered only when both keys are set.  Each
     * is one file or a list (at most CONFIG_TLS_MAX_CERTS, one per key
     * type: RSA and ECDSA side by side); key i goes with certificate i.
     * At load every file is read and each key checked against its
     * certificate (so an unreadable or mismatched pair is a config
     * error). */
    char   *tls_cert_files[CONFIG_TLS_MAX_CERTS]; /* PEM, leaf first */
    char   *tls_key_files[CONFIG_TLS_MAX_CERTS];  /* PEM private keys */
    size_t  ntls_certs;             /* 0 = no TLS */
    char   *tls_cert_file;          /* tls_cert_files[0] (not a copy) */
    char   *tls_key_file;           /* tls_key_files[0] (not a copy) */
    int     tls_min_version;        /* CONFIG_TLS12 (default) or CONFIG_TLS13 */
    char   *tls_ciphers;            /* OpenSSL list for TLS 1.2; NULL = default */
    char   *tls_ca_file;            /* outbound: PEM CA bundle that verifies
                                       next hops; NULL = the system's */

    /* dns: the resolver used for MX routes (dns/dns.h) */
    char   *dns_servers;            /* "ip, ip:port, [v6]:port"; NULL =
                                       /etc/resolv.conf */
    uint64_t dns_timeout_ms;        /* per try, default 5s */
    int     dns_attempts;           /* tries per server, default 2 */
    uint64_t dns_min_ttl_ms;        /* cache TTL clamp, default 0 */
    uint64_t dns_max_ttl_ms;        /* default 1d */
    int     dns_cache_size;         /* rrsets per process, default 10000 */
    int     dns_address_family;     /* CONFIG_DNS_BOTH (default), _IPV4, _IPV6 */
    int     dns_prefer;             /* CONFIG_DNS_IPV4 (default) or _IPV6 */
    int     dns_address_limit;      /* addresses tried per destination, 5 */

    /* dkim: sign mail whose From: domain (or a parent) has keys, when the
     * client is in dkim_sign_networks (default: relay.allow_networks) or
     * (later) authenticated. */
    struct config_dkim_key *dkim_sign;
    size_t  ndkim_sign;
    struct cidr *dkim_sign_networks;
    size_t  ndkim_sign_networks;

    /* auth (RFC 4954 SMTP AUTH, PLAIN and LOGIN): user:crypt-hash lines,
     * read by each worker before it drops its privileges (and on reload);
     * NULL = AUTH not offered. */
    char   *auth_password_file;
    bool    auth_allow_plaintext_loopback; /* AUTH without TLS on loopback */
    int     auth_max_failures;      /* per client address, then 421 */
    uint64_t auth_failure_delay_ms; /* 1s: the reply to the first failure
                                       is held this long, doubling for
                                       each further one from the address */
    uint64_t auth_failure_delay_max_ms; /* 8s: ... up to this (at most
                                       CONFIG_AUTH_DELAY_LIMIT_MS) */
    bool    auth_received_header;   /* the login in Received: (default no) */
    /* auth.backend: NULL or "file" (auth.password_file), or "dovecot":
     * checks go to Dovecot's auth service at auth.dovecot_socket (a unix
     * socket path, or "inet:ADDRESS:PORT"), each answered within
     * auth.dovecot_timeout (10s) or 454 (smtpd/session_dovecot.c). */
    char   *auth_backend;
    char   *auth_dovecot_socket;
    uint64_t auth_dovecot_timeout_ms;
    bool    submission_sender_login_match; /* MAIL FROM bound to the login */

    /* screen: the DNS lists asked before the greeting (config_screen.c) */
    struct config_dnsbl *screen_dnsbl;
    size_t  nscreen_dnsbl;
    int     screen_threshold;       /* refused at a score >= this; 1 */
    uint64_t screen_timeout_ms;     /* a list silent this long scores 0 */

    /* egress: sources and pools (config_egress.c) */
    struct config_egress_source *egress_sources;
    size_t  negress_sources;
    struct config_egress_pool *egress_pools;
    size_t  negress_pools;
    char   *egress_default_pool;    /* as written, or NULL */
    size_t  egress_default;         /* index into egress_pools */
    uint64_t egress_recheck_ms;     /* a source that could not bind is
                                       tried again this often; 60s */
    /* greylist: unauthenticated mail on role mx listeners (grey/,
     * smtpd/session_grey.c); state in <spool.dir>/greylist.mdb */
    bool    grey_enabled;           /* false */
    uint64_t grey_delay_ms;         /* 5m: deferred until this long */
    uint64_t grey_expiry_ms;        /* 1d: an unconfirmed triplet's life */
    uint64_t grey_pass_lifetime_ms; /* 36d after the last passing message */
    int     grey_ipv4_prefix;       /* 24 (32: the exact address) */
    int     grey_ipv6_prefix;       /* 64 */
    struct cidr *grey_allow_networks;   /* never greylisted */
    size_t  ngrey_allow_networks;
    struct config_domains grey_allow_senders;   /* sender domains */
    struct config_domains grey_allow_rcpts;     /* recipient domains */
    bool    grey_dnswl_exempt;      /* true: a client that screen.dnsbl
                                       scored below 0 is not greylisted */

    /* quotas: messages and body bytes in the queue per key of each kind,
     * indexed as enum status_qkind (sender domain, recipient domain, AUTH
     * user, client network); 0 = no quota (smtpd/session_quota.c,
     * delivery/quota.c) */
    int     quota_msgs[CONFIG_QUOTA_KINDS];
    uint64_t quota_bytes[CONFIG_QUOTA_KINDS];
    int     quota_ipv4_prefix;      /* 24: a client network's size */
    int     quota_ipv6_prefix;      /* 64 */
    /* events: delivery events to a target (events/events.h,
     * config_events.c, docs/EVENTS.md); off without a target */
    unsigned events_types;          /* bit (1 << i) per config_event_types[i] */
    char   *events_headers;         /* "X-Msg-Id, X-Campaign" or NULL */
    uint64_t events_max_backlog;    /* unsent bytes kept, 1G */
    int     events_when_full;       /* CONFIG_EVENTS_DROP_OLDEST (default)
                                       or CONFIG_EVENTS_BACKPRESSURE */
    int     events_batch;           /* records per offer, 500 */
    char   *events_http_url;        /* POST target, or NULL */
    char   *events_http_secret_file; /* HMAC-SHA256 key, or NULL */
    uint64_t events_http_timeout_ms; /* 10s */
    char   *events_redis_address;   /* "host:port" of redis-server, or NULL */
    char   *events_redis_stream;    /* "mtad:events" */
    int     events_redis_maxlen;    /* XADD MAXLEN ~, 1000000; 0: none */
    char   *events_redis_password_file; /* AUTH password, or NULL */
    /* cluster: limits shared across nodes through Redis (cluster/,
     * config_cluster.c, docs/SCALING.md); off without an address */
    char   *cluster_redis;          /* "host:port" or "/unix/path" entries,
                                       joined by ","; NULL: off */
    bool    cluster_tls;            /* TLS to Redis */
    char   *cluster_tls_ca_file;
    char   *cluster_user;           /* ACL user (AUTH user pass), or NULL */
    char   *cluster_password_file;  /* read by the master at start */
    char   *cluster_key_prefix;     /* "mtad:" */
    char   *cluster_node_id;        /* NULL: server.hostname */
    uint64_t cluster_timeout_ms;    /* connect and reply, 1s */
    uint64_t cluster_sync_ms;       /* sync_interval, 100ms */
    char   *cluster_sentinel;       /* sentinel.addresses, joined; or NULL */
    char   *cluster_sentinel_master; /* sentinel.master_name */
};

/* events.types names, in the order of enum events_type (events.h). */
#define CONFIG_EVENT_NTYPES 8
#define CONFIG_EVENT_TYPE_NAMES "reception", "delivery", "deferral", \
    "bounce", "expiry", "dsn", "suspension", "resumption"
extern const char *const config_event_types[CONFIG_EVENT_NTYPES];
#define CONFIG_EVENT_HEADERS 8      /* events.headers names at most */
#define CONFIG_EVENTS_DROP_OLDEST  0
#define CONFIG_EVENTS_BACKPRESSURE 1

/* dns_address_family / dns_prefer values: as enum dns_family in dns.h. */
#define CONFIG_DNS_BOTH 0
#define CONFIG_DNS_IPV4 1
#define CONFIG_DNS_IPV6 2

/* tls_min_version values: the protocol's version numbers, as OpenSSL's
 * TLS1_2_VERSION and TLS1_3_VERSION (config.h does not include OpenSSL). */
#define CONFIG_TLS12  0x0303
#define CONFIG_TLS13  0x0304

/* Load and check FILE.  On error returns NULL and writes the messages,
 * newline-separated, into err (always terminated, truncated if long). */
struct config *config_load(const char *path, char *err, size_t errsz);
void        config_free(struct config *cfg);   /* NULL ok */

/* config_show - every key of relay.yaml with the value in force, one
 * "section.key: value" line each in the order of the key tables (so a new
 * key is shown without more code), "  # default" after those the file did
 * not set; values YAML-quoted when needed, control characters escaped.
 * No key holds a secret (passwords live in auth.password_file), so all
 * are shown.  Returns 0, or -1 when writing to f failed. */
int         config_show(const struct config *cfg, FILE *f);

/* config_submit_listen - the listener local programs submit to (what
 * mtad-sendmail connects to): the first server.listen entry on a loopback
 * address with role mx, without implicit TLS or PROXY; NULL when none.
 * A pointer into cfg. */
const struct config_listen *config_submit_listen(const struct config *cfg);

/* auth.backend is dovecot. */
bool        config_auth_dovecot(const struct config *cfg);
/* auth.dovecot_socket as an address: a unix path (AF_UNIX) or
 * "inet:ADDRESS:PORT" (an IPv4 or [IPv6] literal); 0, or -1 with why. */
struct sockaddr_storage;
int         config_dovecot_addr(const char *spec, struct sockaddr_storage *ss,
                unsigned *sslen, const char **why);

/* The submission hint: the master writes that listener's address,
 * server.hostname and limits.max_message_size, one "key value" line
 * each, to the file CONFIG_SUBMIT_NAME next to server.control_socket
 * (mode 0644), so that mtad-sendmail, run by a user who may not read
 * relay.yaml, finds them without it and without privileges.  The
 * default control socket's directory makes CONFIG_SUBMIT_PATH. */
#define CONFIG_SUBMIT_NAME  "submit"
#define CONFIG_SUBMIT_PATH  "/run/mtad/submit"

#endif /* MTAD_CONFIG_H */
