/*
 * config_egress.c - the egress section: the local addresses mail leaves
 * from (sources, each with its own EHLO name) and the weighted sets of
 * them (pools) that routes and the sender-domain table name.
 *
 * PURPOSE   egress.sources: a sequence of {name, address, ehlo};
 *           egress.pools: a sequence of {name, sources}, sources a
 *           mapping of source name to weight ({a: 3, b: 1}) or a
 *           sequence of names (weight 1 each); egress.default_pool.
 * CONTRACT  After config_check_egress() every pool member is an index
 *           into cfg->egress_sources and egress_default is an index into
 *           cfg->egress_pools; sources without pools make one implicit
 *           pool "default" of them all (weight 1).  No egress section:
 *           no sources, no pools (delivery uses its implicit source).
 *           Nothing here asks DNS: the PTR of an address is the
 *           operator's to match (mtad -t does not block on it).
 * FAILURE   Every problem is one config_addf() line with file:line:col.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <yaml.h>

#include "common/util.h"
#include "router/route.h"
#include "config/config.h"
#include "config/config_int.h"

#define EG_NAME_WHAT "a name (letters, digits, '.', '_', '-'; at most 63)"


/* config_eg_addr - an IPv4 or IPv6 address (no port, no brackets) into
 * src; 0, or -1. */
static int
config_eg_addr(const char *v, struct config_egress_source *src)
{
    struct sockaddr_in  *s4 = (struct sockaddr_in *)&src->addr;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&src->addr;

    memset(&src->addr, 0, sizeof(src->addr));
    if (inet_pton(AF_INET, v, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        src->addrlen = sizeof(*s4);
        return 0;
    }
    if (inet_pton(AF_INET6, v, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        src->addrlen = sizeof(*s6);
        return 0;
    }
    return -1;
}


/* config_eg_source - one egress.sources item. */
static int
config_eg_source(struct config_parse *p, yaml_node_t *n, const char *path,
    struct config_egress_source *src)
{
    static const char keys[] = "name, address, ehlo";
    yaml_node_pair_t *pair;
    char              kpath[CONFIG_PATH_MAX], show[CONFIG_SHOW_MAX + 8];
    const char       *name, *v;
    int               before = p->nerr;

    if (n->type != YAML_MAPPING_NODE) {
        config_expected(p, n, path, "a mapping with name, address and ehlo");
        return -1;
    }
    src->line = (int)n->start_mark.line + 1;
    src->col = (int)n->start_mark.column + 1;
    for (pair = n->data.mapping.pairs.start;
        pair < n->data.mapping.pairs.top; pair++) {
        yaml_node_t *kn = yaml_document_get_node(p->doc, pair->key);
        yaml_node_t *vn = yaml_document_get_node(p->doc, pair->value);

        if ((name = config_scalar(p, kn, path, "a key name")) == NULL)
            continue;
        config_path(kpath, sizeof(kpath), path, name);
        if (strcmp(name, "name") == 0) {
            v = config_scalar(p, vn, kpath, EG_NAME_WHAT);
            if (v != NULL && !route_pool_name_ok(v))
                config_expected(p, vn, kpath, EG_NAME_WHAT);
            else if (v != NULL)
                config_set_str(&src->name, v);
        } else if (strcmp(name, "address") == 0) {
            v = config_scalar(p, vn, kpath, "an IPv4 or IPv6 address");
            if (v != NULL && config_eg_addr(v, src) < 0)
                config_expected(p, vn, kpath, "an IPv4 or IPv6 address "
                    "(no port, no brackets)");
            else if (v != NULL)
                config_set_str(&src->address, v);
        } else if (strcmp(name, "ehlo") == 0) {
            v = config_scalar(p, vn, kpath, "a host name");
            if (v != NULL && !config_valid_hostname(v))
                config_expected(p, vn, kpath, "a host name like "
                    "mta1.example.org (the address's PTR)");
            else if (v != NULL)
                config_set_str(&src->ehlo, v);
        } else {
            config_addf(p, &kn->start_mark, "%s: unknown key %s (expected "
                "one of: %s)", kpath, config_found(kn, show, sizeof(show)),
                keys);
        }
    }
    if (p->nerr == before && src->name == NULL)
        config_addf(p, &n->start_mark, "%s.name: required key is missing",
            path);
    if (p->nerr == before && src->address == NULL)
        config_addf(p, &n->start_mark, "%s.address: required key is "
            "missing", path);
    if (p->nerr == before && src->ehlo == NULL)
        config_addf(p, &n->start_mark, "%s.ehlo: required key is missing "
            "(the name the address's PTR gives)", path);
    return p->nerr == before ? 0 : -1;
}


static void
config_eg_source_clear(struct config_egress_source *s)
{
    free(s->name);
    free(s->address);
    free(s->ehlo);
    memset(s, 0, sizeof(*s));
}


static void
config_eg_pool_clear(struct config_egress_pool *pl)
{
    size_t i;

    for (i = 0; i < pl->nm; i++)
        free(pl->m[i].name);
    free(pl->m);
    free(pl->name);
    memset(pl, 0, sizeof(*pl));
}


void
config_free_egress(struct config *cfg)
{
    size_t i;

    for (i = 0; i < cfg->negress_sources; i++)
        config_eg_source_clear(&cfg->egress_sources[i]);
    free(cfg->egress_sources);
    for (i = 0; i < cfg->negress_pools; i++)
        config_eg_pool_clear(&cfg->egress_pools[i]);
    free(cfg->egress_pools);
    free(cfg->egress_default_pool);
    cfg->egress_sources = NULL;
    cfg->egress_pools = NULL;
    cfg->egress_default_pool = NULL;
    cfg->negress_sources = cfg->negress_pools = 0;
}


/* egress.sources: names and addresses once each. */
void
config_set_egress_sources(struct config_parse *p, const yaml_node_t *n,
    const char *path)
{
    struct config                *cfg = p->cfg;
    struct config_egress_source  *s;
    char                          ipath[CONFIG_PATH_MAX];
    long                          i, j, cnt;
    size_t                        ns = 0;

    cnt = config_seq_len(p, n, path, "a sequence of {name, address, ehlo}");
    if (cnt < 0)
        return;
    if (cnt > CONFIG_EGRESS_MAX) {
        config_addf(p, &n->start_mark, "%s: at most %d sources", path,
            CONFIG_EGRESS_MAX);
        return;
    }
    s = xcalloc(cnt ? (size_t)cnt : 1, sizeof(*s));
    for (i = 0; i < cnt; i++) {
        yaml_node_t *it = config_item(p, n, i);

        config_ipath(ipath, sizeof(ipath), path, i);
        if (config_eg_source(p, it, ipath, &s[ns]) != 0) {
            config_eg_source_clear(&s[ns]);
            continue;
        }
        for (j = 0; j < (long)ns; j++)
            if (strcmp(s[j].name, s[ns].name) == 0 ||
                (s[j].addrlen == s[ns].addrlen &&
                memcmp(&s[j].addr, &s[ns].addr, s[j].addrlen) == 0))
                break;
        if (j < (long)ns) {
            config_addf(p, &it->start_mark, "%s: %s %s is listed twice "
                "(also %s[%ld])", ipath, strcmp(s[j].name, s[ns].name) == 0 ?
                "name" : "address", strcmp(s[j].name, s[ns].name) == 0 ?
                s[ns].name : s[ns].address, path, j);
            config_eg_source_clear(&s[ns]);
            continue;
        }
        ns++;
    }
    for (i = 0; i < (long)cfg->negress_sources; i++)
        config_eg_source_clear(&cfg->egress_sources[i]);
    free(cfg->egress_sources);
    cfg->egress_sources = s;
    cfg->negress_sources = ns;
}


/* config_eg_member - one "name: weight" (wn NULL: weight 1) of a pool. */
static void
config_eg_member(struct config_parse *p, struct config_egress_pool *pl,
    yaml_node_t *kn, yaml_node_t *wn, const char *path)
{
    const char *name, *w;
    size_t      i;
    int         weight = 1;

    if ((name = config_scalar(p, kn, path, "a source name")) == NULL)
        return;
    if (wn != NULL && (w = config_scalar(p, wn, path, "a weight 1-1000")) ==
        NULL)
        return;
    if (wn != NULL && config_parse_int(w, 1, 1000, &weight) != 0) {
        config_expected(p, wn, path, "a weight 1-1000");
        return;
    }
    for (i = 0; i < pl->nm; i++)
        if (strcmp(pl->m[i].name, name) == 0) {
            config_addf(p, &kn->start_mark, "%s: source %s is listed twice",
                path, name);
            return;
        }
    pl->m = xrealloc(pl->m, (pl->nm + 1) * sizeof(*pl->m));
    pl->m[pl->nm].name = xstrdup(name);
    pl->m[pl->nm].weight = (unsigned)weight;
    pl->m[pl->nm].source = 0;
    pl->m[pl->nm].line = (int)kn->start_mark.line + 1;
    pl->m[pl->nm].col = (int)kn->start_mark.column + 1;
    pl->nm++;
}


/* config_eg_members - a pool's sources: {a: 3, b: 1} or [a, b]. */
static void
config_eg_members(struct config_parse *p, struct config_egress_pool *pl,
    yaml_node_t *n, const char *path)
{
    yaml_node_pair_t *pair;
    char              ipath[CONFIG_PATH_MAX];
    long              i;
    int               before = p->nerr;

    if (n->type == YAML_MAPPING_NODE) {
        for (pair = n->data.mapping.pairs.start;
            pair < n->data.mapping.pairs.top; pair++) {
            yaml_node_t *kn = yaml_document_get_node(p->doc, pair->key);

            config_path(ipath, sizeof(ipath), path,
                kn->type == YAML_SCALAR_NODE ?
                (const char *)kn->data.scalar.value : "?");
            config_eg_member(p, pl, kn,
                yaml_document_get_node(p->doc, pair->value), ipath);
        }
    } else if (n->type == YAML_SEQUENCE_NODE) {
        for (i = 0; i < n->data.sequence.items.top -
            n->data.sequence.items.start; i++) {
            config_ipath(ipath, sizeof(ipath), path, i);
            config_eg_member(p, pl, config_item(p, n, i), NULL, ipath);
        }
    } else {
        config_expected(p, n, path, "a mapping of source names to weights "
            "({a: 3, b: 1}) or a sequence of source names");
        return;
    }
    if (pl->nm == 0 && p->nerr == before)
        config_addf(p, &n->start_mark, "%s: a pool needs at least one "
            "source", path);
}


/* config_eg_pool - one egress.pools item. */
static int
config_eg_pool(struct config_parse *p, yaml_node_t *n, const char *path,
    struct config_egress_pool *pl)
{
    yaml_node_pair_t *pair;
    char              kpath[CONFIG_PATH_MAX], show[CONFIG_SHOW_MAX + 8];
    const char       *name, *v;
    int               before = p->nerr, have_sources = 0;

    if (n->type != YAML_MAPPING_NODE) {
        config_expected(p, n, path, "a mapping with name and sources");
        return -1;
    }
    for (pair = n->data.mapping.pairs.start;
        pair < n->data.mapping.pairs.top; pair++) {
        yaml_node_t *kn = yaml_document_get_node(p->doc, pair->key);
        yaml_node_t *vn = yaml_document_get_node(p->doc, pair->value);

        if ((name = config_scalar(p, kn, path, "a key name")) == NULL)
            continue;
        config_path(kpath, sizeof(kpath), path, name);
        if (strcmp(name, "name") == 0) {
            v = config_scalar(p, vn, kpath, EG_NAME_WHAT);
            if (v != NULL && !route_pool_name_ok(v))
                config_expected(p, vn, kpath, EG_NAME_WHAT);
            else if (v != NULL)
                config_set_str(&pl->name, v);
        } else if (strcmp(name, "sources") == 0) {
            config_eg_members(p, pl, vn, kpath);
            have_sources = 1;
        } else {
            config_addf(p, &kn->start_mark, "%s: unknown key %s (expected "
                "one of: name, sources)", kpath,
                config_found(kn, show, sizeof(show)));
        }
    }
    if (p->nerr == before && pl->name == NULL)
        config_addf(p, &n->start_mark, "%s.name: required key is missing",
            path);
    if (p->nerr == before && !have_sources)
        config_addf(p, &n->start_mark, "%s.sources: required key is "
            "missing", path);
    return p->nerr == before ? 0 : -1;
}


/* egress.pools: names once each; members checked after the walk. */
void
config_set_egress_pools(struct config_parse *p, const yaml_node_t *n,
    const char *path)
{
    struct config              *cfg = p->cfg;
    struct config_egress_pool  *pl;
    char                        ipath[CONFIG_PATH_MAX];
    long                        i, j, cnt;
    size_t                      np = 0;

    cnt = config_seq_len(p, n, path, "a sequence of {name, sources}");
    if (cnt < 0)
        return;
    if (cnt > CONFIG_EGRESS_MAX) {
        config_addf(p, &n->start_mark, "%s: at most %d pools", path,
            CONFIG_EGRESS_MAX);
        return;
    }
    pl = xcalloc(cnt ? (size_t)cnt : 1, sizeof(*pl));
    for (i = 0; i < cnt; i++) {
        yaml_node_t *it = config_item(p, n, i);

        config_ipath(ipath, sizeof(ipath), path, i);
        if (config_eg_pool(p, it, ipath, &pl[np]) != 0) {
            config_eg_pool_clear(&pl[np]);
            continue;
        }
        for (j = 0; j < (long)np; j++)
            if (strcmp(pl[j].name, pl[np].name) == 0)
                break;
        if (j < (long)np) {
            config_addf(p, &it->start_mark, "%s: pool %s is listed twice "
                "(also %s[%ld])", ipath, pl[np].name, path, j);
            config_eg_pool_clear(&pl[np]);
            continue;
        }
        pl[np].idx = (int)i;
        pl[np].line = (int)it->start_mark.line + 1;
        pl[np].col = (int)it->start_mark.column + 1;
        np++;
    }
    for (i = 0; i < (long)cfg->negress_pools; i++)
        config_eg_pool_clear(&cfg->egress_pools[i]);
    free(cfg->egress_pools);
    cfg->egress_pools = pl;
    cfg->negress_pools = np;
}


/* config_eg_place - a yaml mark from a remembered line and column. */
static yaml_mark_t
config_eg_place(int line, int col)
{
    yaml_mark_t m;

    memset(&m, 0, sizeof(m));
    m.line = line > 0 ? (size_t)line - 1 : 0;
    m.column = col > 0 ? (size_t)col - 1 : 0;
    return m;
}


/* config_eg_implicit - sources without pools: one pool "default" of
 * them all, weight 1 each. */
static void
config_eg_implicit(struct config *cfg)
{
    struct config_egress_pool *pl = xcalloc(1, sizeof(*pl));
    size_t                     i;

    pl->name = xstrdup("default");
    pl->m = xcalloc(cfg->negress_sources, sizeof(*pl->m));
    for (i = 0; i < cfg->negress_sources; i++) {
        pl->m[i].name = xstrdup(cfg->egress_sources[i].name);
        pl->m[i].weight = 1;
        pl->m[i].source = i;
    }
    pl->nm = cfg->negress_sources;
    free(cfg->egress_pools);        /* an empty one: every entry was bad */
    cfg->egress_pools = pl;
    cfg->negress_pools = 1;
}


/*
 * config_check_egress - after the walk: pools name sources that exist,
 * pools need sources, default_pool names a pool (unset: the pool
 * "default" when there is one, else the first).
 */
void
config_check_egress(struct config_parse *p)
{
    struct config *cfg = p->cfg;
    yaml_mark_t    m;
    size_t         i, j, k;

    if (cfg->negress_pools > 0 && cfg->negress_sources == 0) {
        m = config_eg_place(cfg->egress_pools[0].line,
            cfg->egress_pools[0].col);
        config_addf(p, &m, "egress.pools: no egress.sources to draw from");
        return;
    }
    for (i = 0; i < cfg->negress_pools; i++) {
        struct config_egress_pool *pl = &cfg->egress_pools[i];

        for (j = 0; j < pl->nm; j++) {
            for (k = 0; k < cfg->negress_sources; k++)
                if (strcmp(cfg->egress_sources[k].name, pl->m[j].name) == 0)
                    break;
            if (k == cfg->negress_sources) {
                m = config_eg_place(pl->m[j].line, pl->m[j].col);
                config_addf(p, &m, "egress.pools[%d] %s: no source named "
                    "%s in egress.sources", pl->idx, pl->name, pl->m[j].name);
                continue;
            }
            pl->m[j].source = k;
        }
    }
    if (cfg->negress_sources > 0 && cfg->negress_pools == 0)
        config_eg_implicit(cfg);
    cfg->egress_default = 0;
    if (cfg->egress_default_pool != NULL) {
        for (i = 0; i < cfg->negress_pools; i++)
            if (strcmp(cfg->egress_pools[i].name,
                cfg->egress_default_pool) == 0)
                break;
        if (i == cfg->negress_pools)
            config_addf(p, p->have_egress_default_mark ?
                &p->egress_default_mark : NULL, "egress.default_pool: no "
                "pool named %s in egress.pools", cfg->egress_default_pool);
        else
            cfg->egress_default = i;
        return;
    }
    for (i = 0; i < cfg->negress_pools; i++)
        if (strcmp(cfg->egress_pools[i].name, "default") == 0)
            cfg->egress_default = i;
}


/* config_show_egress - egress.sources (pools 0) or egress.pools (1) as
 * flow YAML for mtad -n. */
void
config_show_egress(FILE *f, const struct config *cfg, int pools)
{
    size_t i, j;

    fputc('[', f);
    for (i = 0; !pools && i < cfg->negress_sources; i++) {
        const struct config_egress_source *s = &cfg->egress_sources[i];

        fprintf(f, "%s{name: %s, address: \"%s\", ehlo: %s}", i ? ", " : "",
            s->name, s->address, s->ehlo);
    }
    for (i = 0; pools && i < cfg->negress_pools; i++) {
        const struct config_egress_pool *pl = &cfg->egress_pools[i];

        fprintf(f, "%s{name: %s, sources: {", i ? ", " : "", pl->name);
        for (j = 0; j < pl->nm; j++)
            fprintf(f, "%s%s: %u", j ? ", " : "", pl->m[j].name,
                pl->m[j].weight);
        fputs("}}", f);
    }
    fputc(']', f);
}
