/*
 * config_set.c - the setters for value kinds that are not a section:
 * dns.servers, delivery.retry, routes (default and static), the load
 * average, the address family, and every plain scalar kind
 * (config_set_scalar_kind).
 */
#include <arpa/inet.h>
#include <errno.h>
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
#include "router/router.h"
#include "dkim/dkim.h"
#include "config/config.h"
#include "config/config_int.h"

/* Own table, so config does not depend on log.c (log_parse_level). */
const struct config_level config_levels[CONFIG_NLEVELS] = {
    { "err", LOGL_ERR }, { "warn", LOGL_WARN }, { "notice", LOGL_NOTICE },
    { "info", LOGL_INFO }, { "debug", LOGL_DEBUG },
};

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
void
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

void
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

/* config_check_fallback - delivery.fallback_relay: smtp: hosts only. */
static int
config_check_fallback(struct config_parse *p, const yaml_node_t *n,
    const char *path, const char *v)
{
    char why[256], show[CONFIG_SHOW_MAX + 8];

    why[0] = '\0';
    if (route_fallback_check(v, strlen(v), 0, why, sizeof(why)) == 0)
        return 0;
    config_addf(p, &n->start_mark, "%s: bad fallback relay %s: %s", path,
        config_found(n, show, sizeof(show)), why);
    return -1;
}


void
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

/* Table lookup of a word, any case (YAML writes True, TRUE); -1 if none. */
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

int
config_bool(const char *v)
{
    static const char *const bools[] = {
        "false", "no", "off", "true", "yes", "on"
    };
    int w = config_word(v, bools, ARRAY_LEN(bools));

    return w < 0 ? -1 : w >= 3;
}

void
config_set_scalar_kind(struct config_parse *p, const struct config_key *k,
    const yaml_node_t *n, const char *path)
{
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
        else if (v != NULL && u == 0 && k->min >= 0)
            config_expected(p, n, path, "a size greater than 0");
        else if (v != NULL)
            *(uint64_t *)f = u;
        break;
    case CONFIG_DURATION:
        config_set_duration(p, k, n, path, f);
        break;
    case CONFIG_BOOL:
        v = config_scalar(p, n, path, "true or false");
        if (v != NULL && (w = config_bool(v)) < 0)
            config_expected(p, n, path, "true or false");
        else if (v != NULL)
            *(bool *)f = w == 1;
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
    case CONFIG_TLSLEVEL:
        v = config_scalar(p, n, path, "none, may, encrypt, verify, dane or "
            "dane-only");
        if (v != NULL && (w = router_tls_level(v)) < 0)
            config_expected(p, n, path, "none, may, encrypt, verify, dane "
                "or dane-only");
        else if (v != NULL)
            *(int *)f = w;
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
    case CONFIG_FALLBACK:
        v = config_scalar(p, n, path, "relays like \"smtp:[host]:25\"");
        if (v != NULL && config_check_fallback(p, n, path, v) == 0)
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
