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
#include <sys/socket.h>

#include "common/util.h"
#include "router/router.h"

struct config_listen {
    char                    *spec;  /* as written: "127.0.0.1:2525" */
    struct sockaddr_storage  addr;
    socklen_t                addrlen;
};

struct config {
    char   *path;                   /* the file it came from */

    /* server */
    char   *hostname;               /* default gethostname() */
    struct config_listen *listen;
    size_t  nlisten;
    int     workers;                /* "auto" -> number of CPUs */
    char   *user;                   /* default "mtad" */
    char   *group;                  /* default "mtad" */
    char   *pid_file;               /* default /run/mtad/mtad.pid */
    char   *control_socket;         /* default /run/mtad/control.sock */
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
    int     connections_per_destination; /* 20 */
    uint64_t connect_timeout_ms;    /* 30s */
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

    /* log */
    char   *log_file;               /* "-" = stderr */
    int     log_level;              /* enum log_level, default info */
    uint64_t log_flush_interval_ms; /* 100ms */

    /* tls: inbound STARTTLS, offered only when both files are set.  At
     * load both files are read and the key is checked against the
     * certificate (so an unreadable or mismatched pair is a config error). */
    char   *tls_cert_file;          /* PEM chain, leaf first; NULL = no TLS */
    char   *tls_key_file;           /* PEM private key */
    int     tls_min_version;        /* CONFIG_TLS12 (default) or CONFIG_TLS13 */
    char   *tls_ciphers;            /* OpenSSL list for TLS 1.2; NULL = default */
};

/* tls_min_version values: the protocol's version numbers, as OpenSSL's
 * TLS1_2_VERSION and TLS1_3_VERSION (config.h does not include OpenSSL). */
#define CONFIG_TLS12  0x0303
#define CONFIG_TLS13  0x0304

/* Load and check FILE.  On error returns NULL and writes the messages,
 * newline-separated, into err (always terminated, truncated if long). */
struct config *config_load(const char *path, char *err, size_t errsz);
void        config_free(struct config *cfg);   /* NULL ok */

#endif /* MTAD_CONFIG_H */
