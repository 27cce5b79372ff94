/*
 * config_listen.c - server.listen: each entry is "host:port" or a mapping
 * (address, proxy, proxy_from, role, tls, the screen's pregreet keys,
 * milters: config_milter.c)
 * checked by its own handler.
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
#include "dkim/dkim.h"
#include "config/config.h"
#include "config/config_int.h"

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

/* A client waits 5 minutes for the greeting (RFC 5321 4.5.3.2), but a
 * pause is a test of a few seconds (postscreen_greet_wait: 6s). */
#define CONFIG_PREGREET_MAX_MS  (60 * 1000)

static int
config_listen_pregreet(struct config_parse *p, const yaml_node_t *n,
    const char *path, struct config_listen *l)
{
    static const struct config_key k = {
        "pregreet", CONFIG_DURATION, 0, 0, 0, NULL
    };
    int before = p->nerr;

    config_set_duration(p, &k, n, path, &l->pregreet_ms);
    if (p->nerr == before && l->pregreet_ms > CONFIG_PREGREET_MAX_MS)
        config_expected(p, n, path, "a pause of at most 1m");
    return p->nerr == before ? 0 : -1;
}

/* config_listen_flag - a boolean key into *out; -1 when not one. */
static int
config_listen_flag(struct config_parse *p, const yaml_node_t *n,
    const char *path, int *out)
{
    const char *v = config_scalar(p, n, path, "true or false");
    int         b;

    if (v == NULL || (b = config_bool(v)) < 0) {
        if (v != NULL)
            config_expected(p, n, path, "true or false");
        return -1;
    }
    *out = b;
    return 0;
}

static int
config_listen_multiline(struct config_parse *p, const yaml_node_t *n,
    const char *path, struct config_listen *l)
{
    return config_listen_flag(p, n, path, &l->pregreet_multiline);
}

static int
config_listen_dnsbl(struct config_parse *p, const yaml_node_t *n,
    const char *path, struct config_listen *l)
{
    int on;

    if (config_listen_flag(p, n, path, &on) < 0)
        return -1;
    l->no_dnsbl = !on;
    return 0;
}


/* greylist: false keeps greylist.enabled off this listener; true is the
 * default and only allowed on role mx (submission clients authenticate). */
static int
config_listen_greylist(struct config_parse *p, const yaml_node_t *n,
    const char *path, struct config_listen *l)
{
    int on;

    if (config_listen_flag(p, n, path, &on) < 0)
        return -1;
    l->no_greylist = !on;
    return 0;
}

static int
config_listen_milters(struct config_parse *p, const yaml_node_t *n,
    const char *path, struct config_listen *l)
{
    return config_set_milters(p, n, path, &l->milters, &l->nmilters);
}


static const struct config_listen_key config_listen_keys[] = {
    { "address", config_listen_address },
    { "proxy_protocol", config_listen_proxy },
    { "proxy_from", config_listen_proxy_from },
    { "role", config_listen_role },
    { "tls", config_listen_tls },
    { "pregreet", config_listen_pregreet },
    { "pregreet_multiline", config_listen_multiline },
    { "dnsbl", config_listen_dnsbl },
    { "greylist", config_listen_greylist },
    { "milters", config_listen_milters },
    { NULL, NULL }
};

void
config_listen_free(struct config_listen *l)
{
    free(l->spec);
    free(l->proxy_from);
    config_free_milters(l->milters, l->nmilters);
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
    const yaml_mark_t *screen_mark = NULL, *grey_mark = NULL;
    const char *screen_key = NULL;
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
                "one of: address, proxy_protocol, proxy_from, role, tls, "
                "pregreet, pregreet_multiline, dnsbl, greylist, milters)",
                kpath,
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
        if (k->set == config_listen_greylist && !l->no_greylist)
            grey_mark = &kn->start_mark;
        if ((k->set == config_listen_pregreet && l->pregreet_ms > 0) ||
            (k->set == config_listen_multiline && l->pregreet_multiline) ||
            (k->set == config_listen_dnsbl && !l->no_dnsbl)) {
            screen_mark = &kn->start_mark;
            screen_key = k->name;
        }
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
    /* Submission clients are known users, and with implicit TLS the
     * client speaks first (its ClientHello): no greeting to test. */
    if (screen_mark != NULL &&
        (l->role == CONFIG_ROLE_SUBMISSION || l->tls_implicit)) {
        config_addf(p, screen_mark, "%s.%s: only on a listener with role "
            "mx in clear text (not %s)", path, screen_key,
            l->tls_implicit ? "tls: implicit" : "role: submission");
        return -1;
    }
    if (grey_mark != NULL && l->role == CONFIG_ROLE_SUBMISSION) {
        config_addf(p, grey_mark, "%s.greylist: only on a listener with "
            "role mx (submission is never greylisted)", path);
        return -1;
    }
    return 0;
}

void
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
        if (nl < CONFIG_LISTEN_MARKS)
            p->listen_marks[nl] = it->start_mark;
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


const struct config_listen *
config_submit_listen(const struct config *cfg)
{
    size_t i;

    for (i = 0; i < cfg->nlisten; i++) {
        const struct config_listen *l = &cfg->listen[i];
        const struct sockaddr *sa = (const struct sockaddr *)&l->addr;
        int loop = 0;

        if (sa->sa_family == AF_INET)
            loop = (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr)
                >> 24) == 127;
        else if (sa->sa_family == AF_INET6)
            loop = IN6_IS_ADDR_LOOPBACK(
                &((const struct sockaddr_in6 *)sa)->sin6_addr);
        if (loop && l->role == CONFIG_ROLE_MX && !l->tls_implicit &&
            l->proxy == 0)
            return l;
    }
    return NULL;
}
