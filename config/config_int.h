/*
 * config_int.h - declarations shared by the parts of config/ (config.c,
 * config_util.c, config_listen.c, config_set.c, config_tls.c,
 * config_dkim.c, config_screen.c, config_egress.c).  Nothing outside config/ includes this.
 * config_dkim.c, config_screen.c, config_milter.c).  Nothing outside config/ includes this.
 *
 * CONTRACT  struct config_parse is the state of one config_load(); every
 *           function here reports problems through config_addf() and never
 *           stops the walk.
 */
#ifndef MTAD_CONFIG_INT_H
#define MTAD_CONFIG_INT_H

#include <stddef.h>
#include <stdint.h>
#include <yaml.h>

#include "config/config.h"

#define CONFIG_PATH_MAX    512     /* dotted key path in messages */
#define CONFIG_SHOW_MAX    64      /* longest value quoted back in a message */
#define CONFIG_DURATION_MAX ((uint64_t)365 * 24 * 60 * 60 * 1000)

enum config_type {
    CONFIG_SECTION,                /* mapping of further keys */
    CONFIG_STRING,                 /* non-empty text (paths, user names) */
    CONFIG_HOSTNAME,
    CONFIG_INT,                    /* int, from min to max */
    CONFIG_WORKERS,                /* "auto" or 1..STATUS_MAX_WORKERS */
    CONFIG_SIZE,                   /* uint64_t bytes, > 0 */
    CONFIG_DURATION,               /* uint64_t ms, from min to 365d */
    CONFIG_BOOL,
    CONFIG_LOGLEVEL,               /* int, enum log_level */
    CONFIG_BARE_NL,                /* bool: accept */
    CONFIG_LISTEN,
    CONFIG_CIDRS,
    CONFIG_RETRY,
    CONFIG_ROUTE,                  /* char *, checked with route_parse() */
    CONFIG_FALLBACK,               /* char *, smtp: hosts only
                                      (route_fallback_check()) */
    CONFIG_STATIC,                 /* routes.static */
    CONFIG_TLSFILE,                /* a string; its node is kept for checks */
    CONFIG_TLSVER,                 /* TLSv1.2 | TLSv1.3 */
    CONFIG_DNSSERVERS,             /* dns.servers: a list or one string */
    CONFIG_DNSFAMILY,              /* ipv4 | ipv6 | both (prefer: no both) */
    CONFIG_DKIM_SIGN,              /* dkim.sign: a sequence of mappings */
    CONFIG_DKIM_NETS,              /* dkim.sign_networks */
    CONFIG_METRICS_NETS,           /* metrics.allow_networks */
    CONFIG_LOAD,                   /* uint32_t load * 100; 0 = off */
    CONFIG_LOGFMT,                 /* text | json */
    CONFIG_HOSTPORT,               /* one "host:port" (metrics.listen) */
    CONFIG_TLSLEVEL,               /* int: none|may|encrypt|verify|dane|
                                      dane-only (router_tls_level()) */
    CONFIG_DNSBL,                  /* screen.dnsbl: a sequence of mappings */
    CONFIG_EGRESS_SOURCES,         /* egress.sources (config_egress.c) */
    CONFIG_EGRESS_POOLS,           /* egress.pools */
    CONFIG_OPAQUE,                 /* shaping: read by shape/ itself from the
                                      same file (shape_rules_load()) */
    CONFIG_GREY_NETS,              /* greylist.allow_networks */
    CONFIG_DOMAINS,                /* struct config_domains: a sequence of
                                      domain names */
    CONFIG_EVTYPES,                /* events.types: names -> unsigned mask */
    CONFIG_EVFULL,                 /* events.when_full */
    CONFIG_EVURL,                  /* events.http.url */
    CONFIG_EVHEADERS,              /* events.headers */
    CONFIG_EVADDR,                 /* events.redis.address: host:port */
    CONFIG_CLADDRS                 /* cluster.redis, sentinel.addresses: a
                                      list (or one string) of host:port or
                                      /unix paths, kept joined by "," */
};

struct config_key {
    const char            *name;
    enum config_type          type;
    size_t                 off;     /* into struct config */
    long long              min, max;
    const struct config_key  *sub;     /* CONFIG_SECTION */
};

#define OFF(field)      offsetof(struct config, field)

/* config.c: the top-level table, of which the others are sections */
extern const struct config_key config_top[];

#define CONFIG_LISTEN_MARKS 64       /* entries of server.listen placed */

struct config_parse {
    const char      *file;          /* as given to config_load() */
    yaml_document_t *doc;
    struct config   *cfg;
    char            *errs;          /* lines joined by '\n' */
    size_t           errlen, errcap;
    int              nerr;
    int              have_default;  /* routes.default was set */
    yaml_mark_t      routes_mark;   /* where "routes:" was, for "missing" */
    yaml_mark_t      dns_ttl_mark;  /* dns.min_ttl's value, for the check */
    int              have_dns_ttl_mark;
    /* tls: where each key was, for the checks made after the walk */
    yaml_mark_t      tls_cert_mark, tls_key_mark, tls_ciphers_mark;
    yaml_mark_t      tls_ca_mark;   /* tls.ca_file's value */
    yaml_mark_t      tls_cert_marks[CONFIG_TLS_MAX_CERTS];
    yaml_mark_t      tls_key_marks[CONFIG_TLS_MAX_CERTS];
    size_t           ntls_keys;     /* tls.key_file entries */
    int              tls_bad;       /* a tls key already failed */
    int              dkim_nets_set; /* dkim.sign_networks was given */
    /* where keys checked after the walk were (have_*: given in the file) */
    yaml_mark_t      pwfile_mark, logfile_mark, bclass_mark;
    int              have_pwfile_mark, have_logfile_mark, have_bclass_mark;
    yaml_mark_t      listen_marks[CONFIG_LISTEN_MARKS]; /* each entry */
    yaml_mark_t      egress_default_mark; /* egress.default_pool's value */
    int              have_egress_default_mark;
    yaml_mark_t      backend_mark, dcsock_mark;  /* auth.backend, ...socket */
    int              have_backend_mark, have_dcsock_mark;
    yaml_mark_t      cluster_mark, cluster_pw_mark;  /* cluster:, its file */
    int              have_cluster_mark, have_cluster_pw_mark;
};

/* config_util.c */
/* Append one message line "FILE:LINE:COL: ..." (mark NULL: no place). */
void config_addf(struct config_parse *p, const yaml_mark_t *mark,
    const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int config_is_null(const yaml_node_t *n);
const char *config_found(const yaml_node_t *n, char *buf, size_t bufsz);
void config_expected(struct config_parse *p, const yaml_node_t *n,
    const char *path, const char *what);
const char *config_scalar(struct config_parse *p, const yaml_node_t *n,
    const char *path, const char *what);
void config_path(char *buf, size_t bufsz, const char *parent, const char *name);
void config_ipath(char *buf, size_t bufsz, const char *path, long i);
void *config_field(struct config_parse *p, const struct config_key *k);
void config_set_str(char **dst, const char *v);
int config_valid_hostname(const char *s);
int config_parse_int(const char *s, long long min, long long max, int *out);
int config_ncpu(void);
void config_set_duration(struct config_parse *p, const struct config_key *k,
    const yaml_node_t *n, const char *path, uint64_t *dst);
long config_seq_len(struct config_parse *p, const yaml_node_t *n,
    const char *path, const char *what);
yaml_node_t *config_item(struct config_parse *p, const yaml_node_t *seq,
    long i);
int config_parse_cidrs(struct config_parse *p, const yaml_node_t *n,
    const char *path, struct cidr **out, size_t *nout);
void config_set_cidrs(struct config_parse *p, const yaml_node_t *n,
    const char *path);

/* config_listen.c */
void config_listen_free(struct config_listen *l);
void config_set_listen(struct config_parse *p, const yaml_node_t *n,
    const char *path);

/* config_set.c */
/* log.level's words, in the order of enum log_level */
#define CONFIG_NLEVELS 5
struct config_level { const char *name; int level; };
extern const struct config_level config_levels[CONFIG_NLEVELS];
void config_set_dns_servers(struct config_parse *p, const yaml_node_t *n,
    const char *path);
void config_set_retry(struct config_parse *p, const struct config_key *k,
    const yaml_node_t *n, const char *path);
void config_set_static(struct config_parse *p, const yaml_node_t *n,
    const char *path);
void config_set_scalar_kind(struct config_parse *p, const struct config_key *k,
    const yaml_node_t *n, const char *path);
/* A relay.yaml boolean: 1 true/yes/on, 0 false/no/off, -1 neither. */
int config_bool(const char *v);

/* config_tls.c */
void config_set_tls(struct config_parse *p, const struct config_key *k,
    const yaml_node_t *n, const char *path);
void config_check_tls(struct config_parse *p);

/* config_auth.c: auth.backend and auth.dovecot_socket */
void config_auth_mark(struct config_parse *p, int backend,
    const yaml_node_t *vn);
void config_check_dovecot(struct config_parse *p);

/* config_screen.c */
void config_free_dnsbl(struct config_dnsbl *z, size_t n);
void config_set_dnsbl(struct config_parse *p, const yaml_node_t *n,
    const char *path);

/* config_egress.c */
void config_free_egress(struct config *cfg);
void config_set_egress_sources(struct config_parse *p, const yaml_node_t *n,
    const char *path);
void config_set_egress_pools(struct config_parse *p, const yaml_node_t *n,
    const char *path);
void config_check_egress(struct config_parse *p);
void config_show_egress(FILE *f, const struct config *cfg, int pools);
/* config_screen.c: greylist's lists */
void config_free_domains(struct config_domains *d);
void config_set_domains(struct config_parse *p, const struct config_key *k,
    const yaml_node_t *n, const char *path);

/* config_milter.c */
void config_free_milters(struct config_milter *m, size_t n);
int config_set_milters(struct config_parse *p, const yaml_node_t *n,
    const char *path, struct config_milter **out, size_t *nout);
/* config_events.c */
void config_set_events(struct config_parse *p, const struct config_key *k,
    const yaml_node_t *n, const char *path);
void config_show_events(FILE *f, const struct config_key *k, const void *at);
void config_check_events(struct config_parse *p);
/* config_cluster.c */
void config_set_cluster_addrs(struct config_parse *p,
    const struct config_key *k, const yaml_node_t *n, const char *path);
void config_check_cluster(struct config_parse *p);

/* config_dkim.c */
void config_free_dkim(struct config_dkim_key *k, size_t n);
void config_set_dkim(struct config_parse *p, const yaml_node_t *n,
    const char *path);
void config_dkim_default_nets(struct config_parse *p);

/* config_check.c */
void config_default_hostname(struct config *cfg);
void config_check_tlsrpt(struct config_parse *p);
void config_tlsrpt_defaults(struct config *cfg);
void config_check_pwfile(struct config_parse *p, const char *path);
void config_check_logfile(struct config_parse *p);
void config_load_bclass(struct config_parse *p);
void config_check_auth(struct config_parse *p);

#endif
