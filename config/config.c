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
 */
#include <arpa/inet.h>
#include <errno.h>
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
#include "common/status.h"
#include "common/util.h"
#include "proxy/proxy.h"
#include "router/route.h"
#include "dkim/dkim.h"
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
    CONFIG_STATIC,                 /* routes.static */
    CONFIG_TLSFILE,                /* a string; its node is kept for checks */
    CONFIG_TLSVER,                 /* TLSv1.2 | TLSv1.3 */
    CONFIG_DNSSERVERS,             /* dns.servers: a list or one string */
    CONFIG_DNSFAMILY,              /* ipv4 | ipv6 | both (prefer: no both) */
    CONFIG_DKIM_SIGN,              /* dkim.sign: a sequence of mappings */
    CONFIG_DKIM_NETS,              /* dkim.sign_networks */
    CONFIG_LOAD,                   /* uint32_t load * 100; 0 = off */
    CONFIG_LOGFMT,                 /* text | json */
    CONFIG_HOSTPORT                /* one "host:port" (metrics.listen) */
};

struct config_key {
    const char            *name;
    enum config_type          type;
    size_t                 off;     /* into struct config */
    long long              min, max;
    const struct config_key  *sub;     /* CONFIG_SECTION */
};

#define OFF(field)      offsetof(struct config, field)
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
    KEY("max_envelope_size", CONFIG_SIZE, max_envelope_size),
    SECTION("load", config_limits_load),
    END
};

static const struct config_key config_relay[] = {
    KEY("allow_networks", CONFIG_CIDRS, allow_networks),
    END
};

static const struct config_key config_spool[] = {
    KEY("dir", CONFIG_STRING, spool_dir),
    KEY("fsync", CONFIG_BOOL, spool_fsync),
    END
};

static const struct config_key config_routes[] = {
    KEY("db", CONFIG_STRING, routes_db),
    KEY("default", CONFIG_ROUTE, routes_default),
    KEY("static", CONFIG_STATIC, static_routes),
    END
};

static const struct config_key config_delivery[] = {
    { "retry", CONFIG_RETRY, OFF(retry_ms), 1, 0, NULL },  /* min 1 ms */
    DUR("max_queue_time", max_queue_time_ms, 1),
    INT("connections_per_destination", connections_per_destination),
    DUR("connect_timeout", connect_timeout_ms, 1),
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
    END
};

static const struct config_key config_tls[] = {
    KEY("cert_file", CONFIG_TLSFILE, tls_cert_files),
    KEY("key_file", CONFIG_TLSFILE, tls_key_files),
    KEY("min_version", CONFIG_TLSVER, tls_min_version),
    KEY("ciphers", CONFIG_STRING, tls_ciphers),
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
    KEY("received_header", CONFIG_BOOL, auth_received_header),
    END
};

static const struct config_key config_submission[] = {
    KEY("sender_login_match", CONFIG_BOOL, submission_sender_login_match),
    END
};

static const struct config_key config_top[] = {
    SECTION("server", config_server),
    SECTION("limits", config_limits),
    SECTION("relay", config_relay),
    SECTION("spool", config_spool),
    SECTION("routes", config_routes),
    SECTION("delivery", config_delivery),
    SECTION("log", config_log),
    SECTION("tls", config_tls),
    SECTION("dns", config_dns),
    SECTION("dkim", config_dkim),
    SECTION("metrics", config_metrics),
    SECTION("auth", config_auth),
    SECTION("submission", config_submission),
    END
};

/* Own table, so config does not depend on log.c (log_parse_level). */
static const struct { const char *name; int level; } config_levels[] = {
    { "err", LOGL_ERR }, { "warn", LOGL_WARN }, { "notice", LOGL_NOTICE },
    { "info", LOGL_INFO }, { "debug", LOGL_DEBUG },
};

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
    yaml_mark_t      tls_cert_marks[CONFIG_TLS_MAX_CERTS];
    yaml_mark_t      tls_key_marks[CONFIG_TLS_MAX_CERTS];
    size_t           ntls_keys;     /* tls.key_file entries */
    int              tls_bad;       /* a tls key already failed */
    int              dkim_nets_set; /* dkim.sign_networks was given */
};

static void config_section(struct config_parse *, const struct config_key *,
    yaml_node_t *, const char *);

/* Append one message line. */
static void __attribute__((format(printf, 3, 4)))
config_addf(struct config_parse *p, const yaml_mark_t *mark,
    const char *fmt, ...)
{
    char line[2048];
    size_t len;
    int n;
    va_list ap;

    if (mark != NULL)
        n = snprintf(line, sizeof(line), "%s:%zu:%zu: ", p->file,
            mark->line + 1, mark->column + 1);
    else
        n = snprintf(line, sizeof(line), "%s: ", p->file);
    if (n < 0 || (size_t)n >= sizeof(line))
        n = 0;
    va_start(ap, fmt);
    (void)vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);

    len = strlen(line);
    if (p->errlen + len + 2 > p->errcap) {
        p->errcap = (p->errlen + len + 2) * 2;
        p->errs = xrealloc(p->errs, p->errcap);
    }
    if (p->errlen > 0)
        p->errs[p->errlen++] = '\n';
    memcpy(p->errs + p->errlen, line, len + 1);
    p->errlen += len;
    p->nerr++;
}

static int
config_is_null(const yaml_node_t *n)
{
    static const char *nulls[] = { "", "~", "null", "Null", "NULL" };
    size_t i;

    if (n->type != YAML_SCALAR_NODE ||
        n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return 0;
    for (i = 0; i < ARRAY_LEN(nulls); i++)
        if (strcmp((const char *)n->data.scalar.value, nulls[i]) == 0)
            return 1;
    return 0;
}

/*
 * What was found, for "expected X, got Y": the value quoted (control
 * characters shown as '?', long values cut) or the kind of node.
 */
static const char *
config_found(const yaml_node_t *n, char *buf, size_t bufsz)
{
    const char *v;
    size_t i, o = 0;

    if (n->type == YAML_MAPPING_NODE)
        return n->data.mapping.pairs.start == n->data.mapping.pairs.top ?
            "an empty mapping" : "a mapping";
    if (n->type == YAML_SEQUENCE_NODE)
        return n->data.sequence.items.start == n->data.sequence.items.top ?
            "an empty sequence" : "a sequence";
    if (config_is_null(n))
        return "an empty value";
    v = (const char *)n->data.scalar.value;
    buf[o++] = '\'';
    for (i = 0; v[i] != '\0' && o + 5 < bufsz; i++) {
        if (i == CONFIG_SHOW_MAX) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        buf[o++] = (unsigned char)v[i] < 0x20 || v[i] == 0x7f ? '?' : v[i];
    }
    buf[o++] = '\'';
    buf[o] = '\0';
    return buf;
}

static void
config_expected(struct config_parse *p, const yaml_node_t *n, const char *path,
    const char *what)
{
    char show[CONFIG_SHOW_MAX + 8];

    config_addf(p, &n->start_mark, "%s: expected %s, got %s", path, what,
        config_found(n, show, sizeof(show)));
}

/* The text of a non-empty scalar, or NULL after reporting what was found. */
static const char *
config_scalar(struct config_parse *p, const yaml_node_t *n, const char *path,
    const char *what)
{
    if (n->type != YAML_SCALAR_NODE || config_is_null(n) ||
        n->data.scalar.length == 0) {
        config_expected(p, n, path, what);
        return NULL;
    }
    if (strlen((const char *)n->data.scalar.value) != n->data.scalar.length) {
        config_addf(p, &n->start_mark, "%s: expected %s, got a value with a "
            "NUL byte", path, what);
        return NULL;
    }
    return (const char *)n->data.scalar.value;
}

/*
 * "parent.name" (or "name" at the top), cut to fit; control characters in
 * a quoted key become '?' so that each message stays one line.
 */
static void
config_path(char *buf, size_t bufsz, const char *parent, const char *name)
{
    size_t o = util_strlcpy(buf, parent, bufsz);

    if (parent[0] != '\0' && o < bufsz)
        o += util_strlcpy(buf + o, ".", bufsz - o);
    if (o < bufsz)
        (void)util_strlcpy(buf + o, name, bufsz - o);
    for (; *buf != '\0'; buf++)
        if ((unsigned char)*buf < 0x20 || *buf == 0x7f)
            *buf = '?';
}

/* "path[i]", cut to fit. */
static void
config_ipath(char *buf, size_t bufsz, const char *path, long i)
{
    char idx[32];
    size_t o;

    (void)snprintf(idx, sizeof(idx), "[%ld]", i);
    o = util_strlcpy(buf, path, bufsz);
    if (o < bufsz)
        (void)util_strlcpy(buf + o, idx, bufsz - o);
}

static void *
config_field(struct config_parse *p, const struct config_key *k)
{
    return (char *)p->cfg + k->off;
}

static void
config_set_str(char **dst, const char *v)
{
    free(*dst);
    *dst = xstrdup(v);
}

static int
config_valid_hostname(const char *s)
{
    size_t i, len = strlen(s);

    if (len > 253 || s[0] == '.' || s[0] == '-')
        return 0;
    for (i = 0; i < len; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
            (s[i] >= '0' && s[i] <= '9') || s[i] == '-' || s[i] == '.'))
            return 0;
    return 1;
}

/* Decimal integer in [min, max]; -1 when not. */
static int
config_parse_int(const char *s, long long min, long long max, int *out)
{
    long long v;
    char *end;

    if (s[0] < '0' || s[0] > '9')
        return -1;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        return -1;
    *out = (int)v;
    return 0;
}

static int
config_ncpu(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);

    if (n < 1)
        return 1;
    return n > STATUS_MAX_WORKERS ? STATUS_MAX_WORKERS : (int)n;
}

static void
config_set_duration(struct config_parse *p, const struct config_key *k,
    const yaml_node_t *n, const char *path, uint64_t *dst)
{
    static const char what[] = "a duration like 30s, 5m, 1h (units ms, s, "
        "m, h, d)";
    const char *v = config_scalar(p, n, path, what);
    uint64_t ms;

    if (v == NULL)
        return;
    if (util_parse_duration(v, &ms) != 0)
        config_expected(p, n, path, what);
    else if (ms < (uint64_t)k->min)
        config_expected(p, n, path, "a duration greater than 0");
    else if (ms > CONFIG_DURATION_MAX)
        config_expected(p, n, path, "a duration of at most 365d");
    else
        *dst = ms;
}

/* Number of items of a sequence node, or -1 after reporting another type. */
static long
config_seq_len(struct config_parse *p, const yaml_node_t *n, const char *path,
    const char *what)
{
    if (n->type != YAML_SEQUENCE_NODE) {
        config_expected(p, n, path, what);
        return -1;
    }
    return n->data.sequence.items.top - n->data.sequence.items.start;
}

static yaml_node_t *
config_item(struct config_parse *p, const yaml_node_t *seq, long i)
{
    return yaml_document_get_node(p->doc, seq->data.sequence.items.start[i]);
}

/* config_parse_cidrs - a sequence of networks into *out (malloc'd) and
 * *nout; -1 after reporting every bad item (then *out is untouched). */
static int
config_parse_cidrs(struct config_parse *p, const yaml_node_t *n,
    const char *path, struct cidr **out, size_t *nout)
{
    static const char what[] = "a network like 10.0.0.0/8 or 2001:db8::/32";
    struct cidr *c;
    char ipath[CONFIG_PATH_MAX];
    long i, cnt;
    int bad = 0;

    cnt = config_seq_len(p, n, path, "a sequence of networks like "
        "[127.0.0.0/8, \"::1/128\"]");
    if (cnt < 0)
        return -1;
    c = xcalloc(cnt > 0 ? (size_t)cnt : 1, sizeof(*c));
    for (i = 0; i < cnt; i++) {
        yaml_node_t *it = config_item(p, n, i);
        const char *v;

        config_ipath(ipath, sizeof(ipath), path, i);
        v = config_scalar(p, it, ipath, what);
        if (v != NULL && util_parse_cidr(v, &c[i]) != 0)
            config_expected(p, it, ipath, what);
        if (v == NULL || c[i].family == 0)
            bad = 1;
    }
    if (bad) {
        free(c);
        return -1;
    }
    free(*out);
    *out = c;
    *nout = (size_t)cnt;
    return 0;
}

static void
config_set_cidrs(struct config_parse *p, const yaml_node_t *n,
    const char *path)
{
    (void)config_parse_cidrs(p, n, path, &p->cfg->allow_networks,
        &p->cfg->nallow_networks);
}

/*
 * A server.listen entry: "host:port", or a mapping whose keys are in
 * config_listen_keys (address required).  The table is the one place to
 * add a key; each handler checks its value and fills the entry.
 */
struct config_listen_key {
    const char *name;
    int       (*set)(struct config_parse *, const yaml_node_t *, const char *,
                  struct config_listen *);
};

static const char config_listen_what[] =
    "host:port like 127.0.0.1:2525, \"[::1]:25\" or \"*:25\"";

static int
config_listen_address(struct config_parse *p, const yaml_node_t *n,
    const char *path, struct config_listen *l)
{
    const char *v = config_scalar(p, n, path, config_listen_what);

    if (v == NULL)
        return -1;
    if (util_parse_hostport(v, &l->addr, &l->addrlen) != 0) {
        config_expected(p, n, path, config_listen_what);
        return -1;
    }
    l->spec = xstrdup(v);
    return 0;
}

static int
config_listen_proxy(struct config_parse *p, const yaml_node_t *n,
    const char *path, struct config_listen *l)
{
    static const char what[] = "v1, v2 or auto";
    const char *v = config_scalar(p, n, path, what);

    if (v == NULL)
        return -1;
    if ((l->proxy = proxy_mode_parse(v)) == 0) {
        config_expected(p, n, path, what);
        return -1;
    }
    return 0;
}

static int
config_listen_proxy_from(struct config_parse *p, const yaml_node_t *n,
    const char *path, struct config_listen *l)
{
    if (config_parse_cidrs(p, n, path, &l->proxy_from, &l->nproxy_from) < 0)
        return -1;
    if (l->nproxy_from == 0) {
        config_expected(p, n, path, "at least one network");
        return -1;
    }
    return 0;
}

static int
config_listen_role(struct config_parse *p, const yaml_node_t *n,
    const char *path, struct config_listen *l)
{
    static const char what[] = "mx or submission";
    const char *v = config_scalar(p, n, path, what);

    if (v == NULL)
        return -1;
    if (strcmp(v, "mx") == 0)
        l->role = CONFIG_ROLE_MX;
    else if (strcmp(v, "submission") == 0)
        l->role = CONFIG_ROLE_SUBMISSION;
    else {
        config_expected(p, n, path, what);
        return -1;
    }
    return 0;
}

static int
config_listen_tls(struct config_parse *p, const yaml_node_t *n,
    const char *path, struct config_listen *l)
{
    static const char what[] = "implicit or starttls";
    const char *v = config_scalar(p, n, path, what);

    if (v == NULL)
        return -1;
    if (strcmp(v, "implicit") == 0)
        l->tls_implicit = 1;
    else if (strcmp(v, "starttls") == 0)
        l->tls_implicit = 0;
    else {
        config_expected(p, n, path, what);
        return -1;
    }
    return 0;
}

static const struct config_listen_key config_listen_keys[] = {
    { "address", config_listen_address },
    { "proxy_protocol", config_listen_proxy },
    { "proxy_from", config_listen_proxy_from },
    { "role", config_listen_role },
    { "tls", config_listen_tls },
    { NULL, NULL }
};

static void
config_listen_free(struct config_listen *l)
{
    free(l->spec);
    free(l->proxy_from);
    memset(l, 0, sizeof(*l));
}

/* config_listen_map - the mapping form of one entry; -1 after errors. */
static int
config_listen_map(struct config_parse *p, const yaml_node_t *n,
    const char *path, struct config_listen *l)
{
    const struct config_listen_key *k;
    yaml_node_pair_t *pair, *prev;
    const yaml_mark_t *proxy_mark = NULL, *from_mark = NULL;
    char kpath[CONFIG_PATH_MAX], show[CONFIG_SHOW_MAX + 8];
    int bad = 0;

    for (pair = n->data.mapping.pairs.start;
        pair < n->data.mapping.pairs.top; pair++) {
        yaml_node_t *kn = yaml_document_get_node(p->doc, pair->key);
        yaml_node_t *vn = yaml_document_get_node(p->doc, pair->value);
        const char *name = config_scalar(p, kn, path, "a key name");

        if (name == NULL) {
            bad = 1;
            continue;
        }
        config_path(kpath, sizeof(kpath), path, name);
        for (prev = n->data.mapping.pairs.start; prev < pair; prev++) {
            yaml_node_t *pk = yaml_document_get_node(p->doc, prev->key);

            if (pk->type == YAML_SCALAR_NODE &&
                strcmp((const char *)pk->data.scalar.value, name) == 0)
                break;
        }
        if (prev < pair) {
            config_addf(p, &kn->start_mark, "%s: duplicate key", kpath);
            bad = 1;
            continue;
        }
        for (k = config_listen_keys; k->name != NULL; k++)
            if (strcmp(k->name, name) == 0)
                break;
        if (k->name == NULL) {
            config_addf(p, &kn->start_mark, "%s: unknown key %s (expected "
                "one of: address, proxy_protocol, proxy_from, role, tls)", kpath,
                config_found(kn, show, sizeof(show)));
            bad = 1;
            continue;
        }
        if (k->set(p, vn, kpath, l) < 0)
            bad = 1;
        if (k->set == config_listen_proxy)
            proxy_mark = &kn->start_mark;
        if (k->set == config_listen_proxy_from)
            from_mark = &kn->start_mark;
    }
    if (bad)
        return -1;
    if (l->spec == NULL) {
        config_addf(p, &n->start_mark, "%s: missing key address (the "
            "host:port to listen on)", path);
        return -1;
    }
    if (proxy_mark != NULL && from_mark == NULL) {
        config_addf(p, proxy_mark, "%s.proxy_protocol: needs proxy_from, the "
            "networks of the load balancers allowed to send the header",
            path);
        return -1;
    }
    if (from_mark != NULL && proxy_mark == NULL) {
        config_addf(p, from_mark, "%s.proxy_from: only with proxy_protocol",
            path);
        return -1;
    }
    return 0;
}

static void
config_set_listen(struct config_parse *p, const yaml_node_t *n,
    const char *path)
{
    struct config *cfg = p->cfg;
    struct config_listen *l;
    char ipath[CONFIG_PATH_MAX];
    long i, j, cnt;
    size_t nl = 0;
    int bad = 0, rc;

    cnt = config_seq_len(p, n, path, "a sequence of host:port like "
        "[\"127.0.0.1:2525\"]");
    if (cnt < 0)
        return;
    if (cnt == 0) {
        config_expected(p, n, path, "at least one host:port");
        return;
    }
    l = xcalloc((size_t)cnt, sizeof(*l));
    for (i = 0; i < cnt; i++) {
        yaml_node_t *it = config_item(p, n, i);

        config_ipath(ipath, sizeof(ipath), path, i);
        if (it->type == YAML_MAPPING_NODE)
            rc = config_listen_map(p, it, ipath, &l[nl]);
        else
            rc = config_listen_address(p, it, ipath, &l[nl]);
        if (rc < 0) {
            config_listen_free(&l[nl]);
            bad = 1;
            continue;
        }
        for (j = 0; j < (long)nl; j++)
            if (l[j].addrlen == l[nl].addrlen &&
                memcmp(&l[j].addr, &l[nl].addr, l[nl].addrlen) == 0)
                break;
        if (j < (long)nl) {
            config_addf(p, &it->start_mark, "%s: '%s' is listed twice "
                "(also %s[%ld])", ipath, l[nl].spec, path, j);
            config_listen_free(&l[nl]);
            bad = 1;
            continue;
        }
        nl++;
    }
    if (bad) {
        for (i = 0; i < (long)nl; i++)
            config_listen_free(&l[i]);
        free(l);
        return;
    }
    for (i = 0; i < (long)cfg->nlisten; i++)
        config_listen_free(&cfg->listen[i]);
    free(cfg->listen);
    cfg->listen = l;
    cfg->nlisten = nl;
}

/*
 * config_dns_server_ok - "192.0.2.1", "192.0.2.1:53", "2001:db8::1" or
 * "[2001:db8::1]:53" (c-ares takes addresses only, no names).
 */
static int
config_dns_server_ok(const char *s)
{
    struct in6_addr a6;
    struct in_addr  a4;
    char    tmp[INET6_ADDRSTRLEN + 8];
    const char *colon, *close;
    int     port;

    if (strlen(s) >= sizeof(tmp))
        return 0;
    if (inet_pton(AF_INET, s, &a4) == 1 || inet_pton(AF_INET6, s, &a6) == 1)
        return 1;
    if (s[0] == '[') {
        if ((close = strchr(s, ']')) == NULL || close[1] != ':')
            return 0;
        memcpy(tmp, s + 1, (size_t)(close - s - 1));
        tmp[close - s - 1] = '\0';
        return inet_pton(AF_INET6, tmp, &a6) == 1 &&
            config_parse_int(close + 2, 1, 65535, &port) == 0;
    }
    if ((colon = strchr(s, ':')) == NULL)
        return 0;
    memcpy(tmp, s, (size_t)(colon - s));
    tmp[colon - s] = '\0';
    return inet_pton(AF_INET, tmp, &a4) == 1 &&
        config_parse_int(colon + 1, 1, 65535, &port) == 0;
}

/* dns.servers: a sequence of addresses, or one string of comma-separated
 * ones; stored comma-joined (the form dns.h takes). */
static void
config_set_dns_servers(struct config_parse *p, const yaml_node_t *n,
    const char *path)
{
    static const char what[] = "resolver addresses like \"127.0.0.1\", "
        "\"127.0.0.1:5353\" or \"[::1]:53\"";
    char    ipath[CONFIG_PATH_MAX], one[64], *joined;
    const char *v, *q;
    size_t  len = 0, cap = 64;
    long    i, cnt;
    int     bad = 0;

    joined = xcalloc(1, cap);
    if (n->type == YAML_SCALAR_NODE) {
        if ((v = config_scalar(p, n, path, what)) == NULL) {
            free(joined);
            return;
        }
        for (q = v;; q++) {             /* every entry, empty ones too */
            size_t m = strcspn(q, ",");
            const char *b = q, *e = q + m;

            while (b < e && (*b == ' ' || *b == '\t'))
                b++;
            while (e > b && (e[-1] == ' ' || e[-1] == '\t'))
                e--;
            if ((size_t)(e - b) >= sizeof(one)) {
                bad = 1;
                break;
            }
            memcpy(one, b, (size_t)(e - b));
            one[e - b] = '\0';
            if (!config_dns_server_ok(one)) {
                bad = 1;
                break;
            }
            q += m;
            if (*q == '\0')
                break;
        }
        if (bad)
            config_expected(p, n, path, what);
        else
            config_set_str(&p->cfg->dns_servers, v);
        free(joined);
        return;
    }
    cnt = config_seq_len(p, n, path, "a sequence of resolver addresses "
        "like [\"127.0.0.1:5353\"]");
    if (cnt < 0) {
        free(joined);
        return;
    }
    if (cnt == 0) {
        config_expected(p, n, path, "at least one resolver address");
        free(joined);
        return;
    }
    for (i = 0; i < cnt; i++) {
        yaml_node_t *it = config_item(p, n, i);
        size_t       m;

        config_ipath(ipath, sizeof(ipath), path, i);
        if ((v = config_scalar(p, it, ipath, what)) == NULL) {
            bad = 1;
            continue;
        }
        if (!config_dns_server_ok(v)) {
            config_expected(p, it, ipath, what);
            bad = 1;
            continue;
        }
        m = strlen(v);
        if (len + m + 2 > cap) {
            cap = (len + m + 2) * 2;
            joined = xrealloc(joined, cap);
        }
        if (len > 0)
            joined[len++] = ',';
        memcpy(joined + len, v, m + 1);
        len += m;
    }
    if (bad) {
        free(joined);
        return;
    }
    free(p->cfg->dns_servers);
    p->cfg->dns_servers = joined;
}

static void
config_set_retry(struct config_parse *p, const struct config_key *k,
    const yaml_node_t *n, const char *path)
{
    struct config *cfg = p->cfg;
    char ipath[CONFIG_PATH_MAX];
    uint64_t *r;
    long i, cnt;
    int before = p->nerr;

    cnt = config_seq_len(p, n, path, "a sequence of durations like "
        "[1m, 5m, 1h]");
    if (cnt < 0)
        return;
    if (cnt == 0) {
        config_expected(p, n, path, "at least one duration");
        return;
    }
    r = xcalloc((size_t)cnt, sizeof(*r));
    for (i = 0; i < cnt; i++) {
        config_ipath(ipath, sizeof(ipath), path, i);
        config_set_duration(p, k, config_item(p, n, i), ipath, &r[i]);
    }
    if (p->nerr != before) {
        free(r);
        return;
    }
    free(cfg->retry_ms);
    cfg->retry_ms = r;
    cfg->nretry = (size_t)cnt;
}

static int
config_check_route(struct config_parse *p, const yaml_node_t *n,
    const char *path, const char *v)
{
    struct route r;
    char why[256], show[CONFIG_SHOW_MAX + 8];

    why[0] = '\0';
    if (route_parse(v, &r, why, sizeof(why)) == 0)
        return 0;
    config_addf(p, &n->start_mark, "%s: bad route %s: %s", path,
        config_found(n, show, sizeof(show)), why);
    return -1;
}

static void
config_set_static(struct config_parse *p, const yaml_node_t *n,
    const char *path)
{
    static const char vwhat[] = "a route like \"smtp:[host]:25\" or "
        "\"maildir:/path\"";
    struct config *cfg = p->cfg;
    struct router_static *r;
    yaml_node_pair_t *pair;
    char kpath[CONFIG_PATH_MAX], why[256], show[CONFIG_SHOW_MAX + 8];
    size_t nr = 0, i, cnt;
    int before = p->nerr;

    if (config_is_null(n))
        return;                         /* "static:" alone: no routes */
    if (n->type != YAML_MAPPING_NODE) {
        config_expected(p, n, path, "a mapping of key: route");
        return;
    }
    cnt = (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
    r = xcalloc(cnt ? cnt : 1, sizeof(*r));
    for (pair = n->data.mapping.pairs.start;
        pair < n->data.mapping.pairs.top; pair++) {
        yaml_node_t *kn = yaml_document_get_node(p->doc, pair->key);
        yaml_node_t *vn = yaml_document_get_node(p->doc, pair->value);
        const char *key, *v;
        char *norm;

        key = config_scalar(p, kn, path, "a key like example.org, "
            ".example.org or user@example.org");
        if (key == NULL)
            continue;
        why[0] = '\0';
        if (route_key_check(key, why, sizeof(why)) != 0) {
            config_addf(p, &kn->start_mark, "%s: bad key %s: %s", path,
                config_found(kn, show, sizeof(show)), why);
            continue;
        }
        norm = xstrdup(key);
        route_key_normalize(norm);
        for (i = 0; i < nr; i++)
            if (strcmp(r[i].key, norm) == 0)
                break;
        config_path(kpath, sizeof(kpath), path, key);
        if (i < nr) {
            config_addf(p, &kn->start_mark, "%s: duplicate key (first at "
                "line %d)", kpath, r[i].line);
            free(norm);
            continue;
        }
        v = config_scalar(p, vn, kpath, vwhat);
        if (v == NULL || config_check_route(p, vn, kpath, v) != 0) {
            free(norm);
            continue;
        }
        r[nr].line = (int)kn->start_mark.line + 1;
        r[nr].col = (int)kn->start_mark.column + 1;
        r[nr].key = norm;
        r[nr].route = xstrdup(v);
        nr++;
    }
    if (p->nerr != before) {
        for (i = 0; i < nr; i++) {
            free(r[i].key);
            free(r[i].route);
        }
        free(r);
        return;
    }
    for (i = 0; i < cfg->nstatic_routes; i++) {
        free(cfg->static_routes[i].key);
        free(cfg->static_routes[i].route);
    }
    free(cfg->static_routes);
    cfg->static_routes = r;
    cfg->nstatic_routes = nr;
}

/* config_set_tls_files - tls.cert_file or tls.key_file: one file name or
 * a list of 1 to CONFIG_TLS_MAX_CERTS; each one's place is kept for the
 * messages of config_check_tls(). */
static void
config_set_tls_files(struct config_parse *p, const struct config_key *k,
    const yaml_node_t *n, const char *path)
{
    static const char what[] = "a file name or a list of 1 to 4 file names";
    struct config *cfg = p->cfg;
    int          cert = k->off == OFF(tls_cert_files);
    char       **dst = cert ? cfg->tls_cert_files : cfg->tls_key_files;
    yaml_mark_t *marks = cert ? p->tls_cert_marks : p->tls_key_marks;
    char         ipath[CONFIG_PATH_MAX];
    const char  *v;
    long         i, cnt = 1;
    size_t       j;

    for (j = 0; j < CONFIG_TLS_MAX_CERTS; j++) {
        free(dst[j]);
        dst[j] = NULL;
    }
    if (n->type == YAML_SEQUENCE_NODE) {
        cnt = n->data.sequence.items.top - n->data.sequence.items.start;
        if (cnt < 1 || cnt > CONFIG_TLS_MAX_CERTS) {
            config_expected(p, n, path, what);
            p->tls_bad = 1;
            return;
        }
    }
    for (i = 0; i < cnt; i++) {
        const yaml_node_t *it = n->type == YAML_SEQUENCE_NODE ?
            config_item(p, n, i) : n;

        if (n->type == YAML_SEQUENCE_NODE)
            config_ipath(ipath, sizeof(ipath), path, i);
        else
            util_strlcpy(ipath, path, sizeof(ipath));
        if ((v = config_scalar(p, it, ipath, n->type == YAML_SEQUENCE_NODE ?
            "a file name" : what)) == NULL) {
            p->tls_bad = 1;
            return;
        }
        dst[i] = xstrdup(v);
        marks[i] = it->start_mark;
    }
    if (cert) {
        cfg->ntls_certs = (size_t)cnt;
        p->tls_cert_mark = n->start_mark;
    } else {
        p->ntls_keys = (size_t)cnt;
        p->tls_key_mark = n->start_mark;
    }
    cfg->tls_cert_file = cfg->tls_cert_files[0];
    cfg->tls_key_file = cfg->tls_key_files[0];
}

/* tls.cert_file, tls.key_file, tls.min_version: set the value and keep
 * where it was written for config_check_tls(). */
static void
config_set_tls(struct config_parse *p, const struct config_key *k,
    const yaml_node_t *n, const char *path)
{
    static const char ver[] = "TLSv1.2 or TLSv1.3";
    struct config *cfg = p->cfg;
    const char *v;

    if (k->type == CONFIG_TLSVER) {
        v = config_scalar(p, n, path, ver);
        if (v != NULL && strcmp(v, "TLSv1.2") == 0)
            cfg->tls_min_version = CONFIG_TLS12;
        else if (v != NULL && strcmp(v, "TLSv1.3") == 0)
            cfg->tls_min_version = CONFIG_TLS13;
        else if (v != NULL)
            config_expected(p, n, path, ver);
        return;
    }
    config_set_tls_files(p, k, n, path);
}

/* The first queued OpenSSL error as text (the queue is cleared). */
static const char *
config_ssl_err(char *buf, size_t bufsz)
{
    unsigned long e = ERR_peek_last_error();

    if (e == 0)
        util_strlcpy(buf, "unknown OpenSSL error", bufsz);
    else
        ERR_error_string_n(e, buf, bufsz);
    ERR_clear_error();
    return buf;
}

/* config_tls_readable - open the file as mtad will (the master is still
 * root at load); a message and -1 when it cannot be read. */
static int
config_tls_readable(struct config_parse *p, const yaml_mark_t *mark,
    const char *key, const char *file)
{
    FILE *fp = fopen(file, "r");

    if (fp == NULL) {
        config_addf(p, mark, "%s: cannot read '%s': %s", key, file,
            strerror(errno));
        return -1;
    }
    fclose(fp);
    return 0;
}

/* config_check_pair - certificate i with key i in a throw-away context:
 * PEM, matching; its key type into *type (EVP_PKEY_RSA ...); -1 after a
 * message. */
static int
config_check_pair(struct config_parse *p, size_t i, int *type)
{
    struct config *cfg = p->cfg;
    const char *cert = cfg->tls_cert_files[i], *key = cfg->tls_key_files[i];
    char why[256];
    SSL_CTX *ctx;
    X509 *x;
    int rc = -1;

    ERR_clear_error();
    if ((ctx = SSL_CTX_new(TLS_server_method())) == NULL) {
        config_addf(p, &p->tls_cert_marks[i], "tls.cert_file: cannot set "
            "up TLS: %s", config_ssl_err(why, sizeof(why)));
        return -1;
    }
    /* The key first: loaded after the certificate, a key that does not
     * match would fail as unusable; loaded before, the certificate drops
     * it quietly and SSL_CTX_check_private_key() names the real problem. */
    if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1)
        config_addf(p, &p->tls_key_marks[i], "tls.key_file: no usable PEM "
            "private key in '%s': %s", key, config_ssl_err(why, sizeof(why)));
    else if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1)
        config_addf(p, &p->tls_cert_marks[i], "tls.cert_file: no usable PEM "
            "certificate in '%s': %s", cert, config_ssl_err(why, sizeof(why)));
    else if (SSL_CTX_check_private_key(ctx) != 1)
        config_addf(p, &p->tls_key_marks[i], "tls.key_file: the key in '%s' "
            "does not match the certificate in tls.cert_file%s%s%s", key,
            cfg->ntls_certs > 1 ? " ('" : "", cfg->ntls_certs > 1 ? cert : "",
            cfg->ntls_certs > 1 ? "')" : "");
    else if ((x = SSL_CTX_get0_certificate(ctx)) != NULL &&
        X509_get0_pubkey(x) != NULL) {
        *type = EVP_PKEY_get_base_id(X509_get0_pubkey(x));
        rc = 0;
    }
    ERR_clear_error();
    SSL_CTX_free(ctx);
    return rc;
}

/* config_check_tls - after the walk: both keys or neither, as many keys
 * as certificates, every file readable, PEM, each key matching its
 * certificate, one certificate per key type (OpenSSL keeps one per type:
 * a second RSA one would silently replace the first), and a usable
 * cipher list. */
static void
config_check_tls(struct config_parse *p)
{
    struct config *cfg = p->cfg;
    int types[CONFIG_TLS_MAX_CERTS];
    SSL_CTX *ctx;
    size_t i, j;
    int bad = 0;

    if (p->tls_bad)
        return;
    if (cfg->ntls_certs == 0 && p->ntls_keys == 0)
        return;                     /* no STARTTLS */
    if (p->ntls_keys == 0) {
        config_addf(p, &p->tls_cert_mark, "tls.key_file: required when "
            "tls.cert_file is set");
        return;
    }
    if (cfg->ntls_certs == 0) {
        config_addf(p, &p->tls_key_mark, "tls.cert_file: required when "
            "tls.key_file is set");
        return;
    }
    if (p->ntls_keys != cfg->ntls_certs) {
        config_addf(p, &p->tls_key_mark, "tls.key_file: %zu key%s for %zu "
            "certificate%s in tls.cert_file; give one key per certificate, "
            "in the same order", p->ntls_keys, p->ntls_keys == 1 ? "" : "s",
            cfg->ntls_certs, cfg->ntls_certs == 1 ? "" : "s");
        return;
    }
    for (i = 0; i < cfg->ntls_certs; i++) {
        bad |= config_tls_readable(p, &p->tls_cert_marks[i], "tls.cert_file",
            cfg->tls_cert_files[i]);
        bad |= config_tls_readable(p, &p->tls_key_marks[i], "tls.key_file",
            cfg->tls_key_files[i]);
    }
    if (bad)
        return;
    for (i = 0; i < cfg->ntls_certs; i++) {
        if (config_check_pair(p, i, &types[i]) < 0) {
            bad = 1;
            continue;
        }
        for (j = 0; j < i; j++)
            if (types[j] == types[i] && !bad)
                config_addf(p, &p->tls_cert_marks[i], "tls.cert_file: '%s' "
                    "has the same key type (%s) as '%s'; give at most one "
                    "certificate per key type (for example one RSA and one "
                    "ECDSA)", cfg->tls_cert_files[i],
                    OBJ_nid2sn(types[i]), cfg->tls_cert_files[j]);
    }
    if (cfg->tls_ciphers != NULL) {
        ERR_clear_error();
        ctx = SSL_CTX_new(TLS_server_method());
        if (ctx != NULL && SSL_CTX_set_cipher_list(ctx, cfg->tls_ciphers) != 1)
            config_addf(p, &p->tls_ciphers_mark, "tls.ciphers: no usable "
                "cipher in '%s'", cfg->tls_ciphers);
        ERR_clear_error();
        SSL_CTX_free(ctx);
    }
}

/* Table lookup of a word, any case (YAML writes True, TRUE); -1 if none. */
/* config_set_load - a load average like 8 or 12.5 (two decimals kept),
 * stored * 100; 0 turns the check off. */
static void
config_set_load(struct config_parse *p, const yaml_node_t *n,
    const char *path, uint32_t *out)
{
    static const char what[] = "a load average like 8 or 12.5 (0 = off)";
    const char *v = config_scalar(p, n, path, what);
    char       *end;
    double      d;

    if (v == NULL)
        return;
    errno = 0;
    d = strtod(v, &end);
    if (end == v || *end != '\0' || errno != 0 || !(d >= 0) || d > 10000) {
        config_expected(p, n, path, what);
        return;
    }
    *out = (uint32_t)(d * 100 + 0.5);
}

static int
config_word(const char *v, const char *const *words, size_t nwords)
{
    size_t i;

    for (i = 0; i < nwords; i++)
        if (strcasecmp(v, words[i]) == 0)
            return (int)i;
    return -1;
}

/* dns.address_family (ipv4 | ipv6 | both) and dns.prefer (ipv4 | ipv6). */
static void
config_set_family(struct config_parse *p, const struct config_key *k,
    const yaml_node_t *n, const char *path)
{
    static const char *const fam[] = { "both", "ipv4", "ipv6" };
    int         both = k->off == OFF(dns_address_family);
    const char *what = both ? "ipv4, ipv6 or both" : "ipv4 or ipv6";
    const char *v = config_scalar(p, n, path, what);
    int         w;

    if (v == NULL)
        return;
    w = config_word(v, fam, ARRAY_LEN(fam));
    if (w < 0 || (w == 0 && !both))
        config_expected(p, n, path, what);
    else
        *(int *)config_field(p, k) = w;    /* CONFIG_DNS_BOTH/IPV4/IPV6 */
}

static void
config_set_scalar_kind(struct config_parse *p, const struct config_key *k,
    const yaml_node_t *n, const char *path)
{
    static const char *const bools[] = {
        "false", "no", "off", "true", "yes", "on"
    };
    static const char *const bare[] = { "reject", "accept" };
    static const char *const fmts[] = { "text", "json" };
    static const char levels[] = "one of err, warn, notice, info, debug";
    static const char size_what[] = "a size like 50M (units K, M, G)";
    void *f = config_field(p, k);
    char range[64];
    const char *v;
    uint64_t u;
    size_t i;
    int w;

    switch (k->type) {
    case CONFIG_STRING:
        if ((v = config_scalar(p, n, path, "a non-empty string")) == NULL)
            break;
        /* a unix socket path must fit sun_path, or binding fails later */
        if (strcmp(path, "server.control_socket") == 0 &&
            strlen(v) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
            config_addf(p, &n->start_mark, "%s: path too long for a unix "
                "socket (%zu bytes, at most %zu)", path, strlen(v),
                sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
            break;
        }
        config_set_str(f, v);
        break;
    case CONFIG_HOSTNAME:
        v = config_scalar(p, n, path, "a host name like mx1.example.net");
        if (v != NULL && !config_valid_hostname(v))
            config_expected(p, n, path, "a host name like mx1.example.net");
        else if (v != NULL)
            config_set_str(f, v);
        break;
    case CONFIG_INT:
        (void)snprintf(range, sizeof(range), "an integer from %lld to %lld",
            k->min, k->max);
        v = config_scalar(p, n, path, range);
        if (v != NULL && config_parse_int(v, k->min, k->max, f) != 0)
            config_expected(p, n, path, range);
        break;
    case CONFIG_WORKERS:
        v = config_scalar(p, n, path, "auto or an integer from 1 to 128");
        if (v != NULL && strcmp(v, "auto") == 0)
            *(int *)f = config_ncpu();
        else if (v != NULL &&
            config_parse_int(v, 1, STATUS_MAX_WORKERS, f) != 0)
            config_expected(p, n, path, "auto or an integer from 1 to 128");
        break;
    case CONFIG_SIZE:
        v = config_scalar(p, n, path, size_what);
        if (v != NULL && util_parse_size(v, &u) != 0)
            config_expected(p, n, path, size_what);
        else if (v != NULL && u == 0)
            config_expected(p, n, path, "a size greater than 0");
        else if (v != NULL)
            *(uint64_t *)f = u;
        break;
    case CONFIG_DURATION:
        config_set_duration(p, k, n, path, f);
        break;
    case CONFIG_BOOL:
        v = config_scalar(p, n, path, "true or false");
        if (v != NULL && (w = config_word(v, bools, ARRAY_LEN(bools))) < 0)
            config_expected(p, n, path, "true or false");
        else if (v != NULL)
            *(bool *)f = w >= 3;
        break;
    case CONFIG_BARE_NL:
        v = config_scalar(p, n, path, "reject or accept");
        if (v != NULL && (w = config_word(v, bare, ARRAY_LEN(bare))) < 0)
            config_expected(p, n, path, "reject or accept");
        else if (v != NULL)
            *(bool *)f = w == 1;
        break;
    case CONFIG_LOGLEVEL:
        if ((v = config_scalar(p, n, path, levels)) == NULL)
            break;
        for (i = 0; i < ARRAY_LEN(config_levels); i++)
            if (strcmp(v, config_levels[i].name) == 0)
                break;
        if (i == ARRAY_LEN(config_levels))
            config_expected(p, n, path, levels);
        else
            *(int *)f = config_levels[i].level;
        break;
    case CONFIG_TLSFILE:
    case CONFIG_TLSVER:
        config_set_tls(p, k, n, path);
        break;
    case CONFIG_DNSFAMILY:
        config_set_family(p, k, n, path);
        break;
    case CONFIG_LOAD:
        config_set_load(p, n, path, f);
        break;
    case CONFIG_LOGFMT:
        v = config_scalar(p, n, path, "text or json");
        if (v != NULL && (w = config_word(v, fmts, ARRAY_LEN(fmts))) < 0)
            config_expected(p, n, path, "text or json");
        else if (v != NULL)
            *(int *)f = w == 1 ? LOG_FORMAT_JSON : LOG_FORMAT_TEXT;
        break;
    case CONFIG_HOSTPORT:
        v = config_scalar(p, n, path, "an address like \"127.0.0.1:9325\"");
        if (v != NULL && util_parse_hostport(v, &p->cfg->metrics_addr,
            &p->cfg->metrics_addrlen) != 0)
            config_expected(p, n, path,
                "an address like \"127.0.0.1:9325\" or \"[::1]:9325\"");
        else if (v != NULL)
            config_set_str(f, v);
        break;
    case CONFIG_ROUTE:
        v = config_scalar(p, n, path, "a route like \"smtp:[host]:25\" or "
            "\"maildir:/path\"");
        if (v != NULL && config_check_route(p, n, path, v) == 0)
            config_set_str(f, v);
        p->have_default = 1;        /* present: "missing" would mislead */
        break;
    default:
        break;
    }
}

/* --- dkim ------------------------------------------------------------ */

/* A DNS label list for s= (RFC 6376 3.1: sub-domain syntax). */
static int
config_valid_selector(const char *s)
{
    size_t i;

    if (s[0] == '.' || s[0] == '-' || strlen(s) > 63)
        return 0;
    for (i = 0; s[i] != '\0'; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
            (s[i] >= '0' && s[i] <= '9') || s[i] == '-' || s[i] == '.' ||
            s[i] == '_'))
            return 0;
    return 1;
}


/* config_dkim_entry - one dkim.sign item: domain, selector, key_file,
 * algorithm (default rsa-sha256); the key file is checked here, as the
 * master (root) will read it, so `mtad -t` names a bad key by line. */
static int
config_dkim_entry(struct config_parse *p, yaml_node_t *n, const char *path,
    struct config_dkim_key *k)
{
    static const char keys[] = "domain, selector, key_file, algorithm";
    yaml_node_pair_t *pair;
    yaml_node_t      *key_node = NULL;
    char              kpath[CONFIG_PATH_MAX], why[512];
    char              show[CONFIG_SHOW_MAX + 8];
    const char       *name, *v;
    int               before = p->nerr;

    k->algorithm = DKIM_RSA_SHA256;
    if (n->type != YAML_MAPPING_NODE) {
        config_expected(p, n, path, "a mapping with domain, selector, "
            "key_file and algorithm");
        return -1;
    }
    for (pair = n->data.mapping.pairs.start;
        pair < n->data.mapping.pairs.top; pair++) {
        yaml_node_t *kn = yaml_document_get_node(p->doc, pair->key);
        yaml_node_t *vn = yaml_document_get_node(p->doc, pair->value);

        if ((name = config_scalar(p, kn, path, "a key name")) == NULL)
            continue;
        config_path(kpath, sizeof(kpath), path, name);
        if (strcmp(name, "domain") == 0) {
            v = config_scalar(p, vn, kpath, "a domain like example.org");
            if (v != NULL && (!config_valid_hostname(v) ||
                strchr(v, '.') == NULL))
                config_expected(p, vn, kpath, "a domain like example.org");
            else if (v != NULL)
                config_set_str(&k->domain, v);
        } else if (strcmp(name, "selector") == 0) {
            v = config_scalar(p, vn, kpath, "a selector like s1");
            if (v != NULL && !config_valid_selector(v))
                config_expected(p, vn, kpath, "a selector like s1 "
                    "(letters, digits, '-', '_', '.')");
            else if (v != NULL)
                config_set_str(&k->selector, v);
        } else if (strcmp(name, "key_file") == 0) {
            if ((v = config_scalar(p, vn, kpath, "a file name")) != NULL) {
                config_set_str(&k->key_file, v);
                key_node = vn;
            }
        } else if (strcmp(name, "algorithm") == 0) {
            v = config_scalar(p, vn, kpath, "rsa-sha256 or ed25519-sha256");
            if (v != NULL && dkim_alg_parse(v) < 0)
                config_expected(p, vn, kpath, "rsa-sha256 or "
                    "ed25519-sha256");
            else if (v != NULL)
                k->algorithm = dkim_alg_parse(v);
        } else {
            config_addf(p, &kn->start_mark, "%s: unknown key %s (expected "
                "one of: %s)", kpath, config_found(kn, show, sizeof(show)),
                keys);
        }
    }
    if (k->domain == NULL && p->nerr == before)
        config_addf(p, &n->start_mark, "%s.domain: required key is missing",
            path);
    if (k->selector == NULL && p->nerr == before)
        config_addf(p, &n->start_mark, "%s.selector: required key is "
            "missing", path);
    if (key_node == NULL && p->nerr == before)
        config_addf(p, &n->start_mark, "%s.key_file: required key is "
            "missing", path);
    if (p->nerr != before)
        return -1;
    if (dkim_key_check(k->key_file, k->algorithm, why, sizeof(why)) != 0) {
        config_addf(p, &key_node->start_mark, "%s.key_file: %s", path, why);
        return -1;
    }
    return 0;
}


static void
config_dkim_clear(struct config_dkim_key *k)
{
    free(k->domain);
    free(k->selector);
    free(k->key_file);
    memset(k, 0, sizeof(*k));
}


static void
config_free_dkim(struct config_dkim_key *k, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        config_dkim_clear(&k[i]);
    free(k);
}


/* dkim.sign: a sequence of entries; one (domain, selector) pair once. */
static void
config_set_dkim(struct config_parse *p, const yaml_node_t *n,
    const char *path)
{
    struct config          *cfg = p->cfg;
    struct config_dkim_key *k;
    char                    ipath[CONFIG_PATH_MAX];
    long                    i, j, cnt;
    size_t                  nk = 0;
    int                     bad = 0;

    cnt = config_seq_len(p, n, path, "a sequence of {domain, selector, "
        "key_file, algorithm}");
    if (cnt < 0)
        return;
    if (cnt > DKIM_MAX_KEYS) {
        config_addf(p, &n->start_mark, "%s: at most %d keys", path,
            DKIM_MAX_KEYS);
        return;
    }
    k = xcalloc(cnt ? (size_t)cnt : 1, sizeof(*k));
    for (i = 0; i < cnt; i++) {
        yaml_node_t *it = config_item(p, n, i);

        config_ipath(ipath, sizeof(ipath), path, i);
        if (config_dkim_entry(p, it, ipath, &k[nk]) != 0) {
            config_dkim_clear(&k[nk]);
            bad = 1;
            continue;
        }
        for (j = 0; j < (long)nk; j++)
            if (strcasecmp(k[j].domain, k[nk].domain) == 0 &&
                strcmp(k[j].selector, k[nk].selector) == 0)
                break;
        if (j < (long)nk) {
            config_addf(p, &it->start_mark, "%s: domain %s selector %s is "
                "listed twice (also %s[%ld])", ipath, k[nk].domain,
                k[nk].selector, path, j);
            config_dkim_clear(&k[nk]);
            bad = 1;
            continue;
        }
        nk++;
    }
    if (bad) {
        config_free_dkim(k, nk);
        return;
    }
    config_free_dkim(cfg->dkim_sign, cfg->ndkim_sign);
    cfg->dkim_sign = k;
    cfg->ndkim_sign = nk;
}


/* dkim.sign_networks defaults to relay.allow_networks (as written). */
static void
config_dkim_default_nets(struct config_parse *p)
{
    struct config *cfg = p->cfg;

    if (p->dkim_nets_set || cfg == NULL)
        return;
    free(cfg->dkim_sign_networks);
    cfg->ndkim_sign_networks = cfg->nallow_networks;
    cfg->dkim_sign_networks = xcalloc(cfg->nallow_networks ?
        cfg->nallow_networks : 1, sizeof(struct cidr));
    memcpy(cfg->dkim_sign_networks, cfg->allow_networks,
        cfg->nallow_networks * sizeof(struct cidr));
}


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
    case CONFIG_DKIM_SIGN:
        config_set_dkim(p, n, path);
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
        if (k->sub == config_routes)
            p->routes_mark = kn->start_mark;
        if (k->off == OFF(tls_ciphers) && keys == config_tls)
            p->tls_ciphers_mark = vn->start_mark;
        if (keys == config_dns && (k->off == OFF(dns_min_ttl_ms) ||
            (k->off == OFF(dns_max_ttl_ms) && !p->have_dns_ttl_mark))) {
            p->dns_ttl_mark = vn->start_mark;
            p->have_dns_ttl_mark = 1;
        }
        config_value(p, k, vn, path);
    }
}

/* Every default of issue 2, before the file is read. */
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
    cfg->bare_newline_accept = false;
    cfg->ipv6_prefix = 64;
    cfg->session_lifetime_ms = 60 * 60 * 1000;
    cfg->max_junk_commands = 100;
    cfg->max_envelope_size = 256 * 1024;

    cfg->nallow_networks = ARRAY_LEN(nets);
    cfg->allow_networks = xcalloc(ARRAY_LEN(nets), sizeof(struct cidr));
    for (i = 0; i < ARRAY_LEN(nets); i++)
        (void)util_parse_cidr(nets[i], &cfg->allow_networks[i]);

    cfg->spool_dir = xstrdup("/run/mtad/spool");
    cfg->spool_fsync = false;
    cfg->routes_db = xstrdup("/var/lib/mtad/routes.mdb");

    cfg->nretry = ARRAY_LEN(retry);
    cfg->retry_ms = xcalloc(ARRAY_LEN(retry), sizeof(uint64_t));
    memcpy(cfg->retry_ms, retry, sizeof(retry));
    cfg->max_queue_time_ms = (uint64_t)5 * 24 * 60 * 60 * 1000;
    cfg->connections_per_destination = 20;
    cfg->connect_timeout_ms = 30 * 1000;

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
config_default_hostname(struct config *cfg)
{
    char host[256];

    if (cfg->hostname != NULL)
        return;
    if (gethostname(host, sizeof(host)) != 0 || host[0] == '\0')
        util_strlcpy(host, "localhost", sizeof(host));
    host[sizeof(host) - 1] = '\0';
    cfg->hostname = xstrdup(host);
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

/* config_check_pwfile - auth.password_file can be read (by root: the
 * workers read it again before they drop privileges) and each line is
 * user:$hash; errors name the file and line. */
static void
config_check_pwfile(struct config_parse *p, const char *path)
{
    char     line[4096];
    unsigned lineno = 0;
    FILE    *fp;
    int      fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    struct stat st;

    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        config_addf(p, NULL, "auth.password_file: %s: %s", path,
            fd < 0 ? strerror(errno) : "not a regular file");
        if (fd >= 0)
            close(fd);
        return;
    }
    if ((fp = fdopen(fd, "r")) == NULL) {
        close(fd);
        config_addf(p, NULL, "auth.password_file: %s: %s", path,
            strerror(errno));
        return;
    }
    while (fgets(line, sizeof(line), fp) != NULL) {
        char *colon;

        lineno++;
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0] == '\0' || line[0] == '#')
            continue;
        colon = strchr(line, ':');
        if (colon == NULL || colon == line || colon[1] != '$') {
            config_addf(p, NULL, "auth.password_file: %s:%u: expected "
                "user:hash (a crypt(3) hash like $y$... or $6$...)", path,
                lineno);
            break;
        }
    }
    explicit_bzero(line, sizeof(line));
    fclose(fp);
}

/* config_check_auth - listeners that need TLS or AUTH have them. */
static void
config_check_auth(struct config_parse *p)
{
    struct config *cfg = p->cfg;
    size_t i;

    if (cfg->auth_password_file != NULL)
        config_check_pwfile(p, cfg->auth_password_file);
    for (i = 0; i < cfg->nlisten; i++) {
        const struct config_listen *l = &cfg->listen[i];

        if (l->tls_implicit && cfg->ntls_certs == 0)
            config_addf(p, NULL, "server.listen %s: tls: implicit needs "
                "tls.cert_file and tls.key_file", l->spec);
        if (l->role == CONFIG_ROLE_SUBMISSION &&
            cfg->auth_password_file == NULL)
            config_addf(p, NULL, "server.listen %s: role: submission needs "
                "auth.password_file", l->spec);
    }
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
    config_check_auth(&p);
    config_dkim_default_nets(&p);
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
    return p.cfg;
}

void
config_free(struct config *cfg)
{
    size_t i;

    if (cfg == NULL)
        return;
    free(cfg->path);
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
    config_free_dkim(cfg->dkim_sign, cfg->ndkim_sign);
    free(cfg->dkim_sign_networks);
    free(cfg->dns_servers);
    free(cfg->load_file);
    free(cfg->metrics_listen);
    free(cfg->auth_password_file);
    free(cfg);
}
