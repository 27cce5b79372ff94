/*
 * config_screen.c - the screen section's DNS lists: screen.dnsbl entries
 * {zone, weight, match}, the match parsed with dns/'s return-code filter
 * so that `mtad -t` names a bad one by line; and greylist's lists of
 * domains (greylist.allow_sender_domains, allow_recipient_domains).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <yaml.h>

#include "common/util.h"
#include "dns/dns.h"
#include "config/config.h"
#include "config/config_int.h"

#define CONFIG_DNSBL_WEIGHT_MAX 1000

static void
config_dnsbl_clear(struct config_dnsbl *z)
{
    free(z->zone);
    free(z->match);
    free(z->filter);
    memset(z, 0, sizeof(*z));
}


void
config_free_dnsbl(struct config_dnsbl *z, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        config_dnsbl_clear(&z[i]);
    free(z);
}


static void
config_dnsbl_zone(struct config_parse *p, yaml_node_t *vn, const char *kpath,
    struct config_dnsbl *z)
{
    static const char what[] = "a DNS zone like zen.example.org";
    const char *v = config_scalar(p, vn, kpath, what);
    size_t      i, n;

    if (v == NULL)
        return;
    n = strlen(v);
    if (n > 0 && v[n - 1] == '.')
        n--;
    /* room for the 72 bytes of an IPv6 client's name before it */
    if (n == 0 || n > DNS_NAME_MAX - 80 || !config_valid_hostname(v)) {
        config_expected(p, vn, kpath, what);
        return;
    }
    free(z->zone);
    z->zone = xstrdup(v);
    z->zone[n] = '\0';
    for (i = 0; i < n; i++)
        if (z->zone[i] >= 'A' && z->zone[i] <= 'Z')
            z->zone[i] = (char)(z->zone[i] - 'A' + 'a');
}


static void
config_dnsbl_match(struct config_parse *p, yaml_node_t *vn,
    const char *kpath, struct config_dnsbl *z)
{
    static const char what[] = "a return-code filter like 127.0.0.2 or "
        "127.0.0.[2..11] (per octet: a number or [N;N..M])";
    const char *v = config_scalar(p, vn, kpath, what);

    if (v == NULL)
        return;
    if (z->filter == NULL)
        z->filter = xmalloc(sizeof(*z->filter));
    if (dns_rbl_filter_parse(v, z->filter) != 0) {
        config_expected(p, vn, kpath, what);
        return;
    }
    config_set_str(&z->match, v);
}


/* weight: a whole number from -1000 to 1000 but 0; negative for an
 * allowlist (config_parse_int() takes no sign). */
static void
config_dnsbl_weight(struct config_parse *p, yaml_node_t *vn,
    const char *kpath, struct config_dnsbl *z)
{
    static const char what[] = "a whole number from -1000 to 1000, not 0 "
        "(negative: an allowlist)";
    const char *v = config_scalar(p, vn, kpath, what);
    int         neg, w;

    if (v == NULL)
        return;
    neg = v[0] == '-';
    if (config_parse_int(v + neg, 1, CONFIG_DNSBL_WEIGHT_MAX, &w) != 0) {
        config_expected(p, vn, kpath, what);
        return;
    }
    z->weight = neg ? -w : w;
}


/* config_dnsbl_entry - one screen.dnsbl item; -1 after errors. */
static int
config_dnsbl_entry(struct config_parse *p, yaml_node_t *n, const char *path,
    struct config_dnsbl *z)
{
    yaml_node_pair_t *pair;
    char              kpath[CONFIG_PATH_MAX], show[CONFIG_SHOW_MAX + 8];
    const char       *name;
    int               before = p->nerr;

    z->weight = 1;
    if (n->type != YAML_MAPPING_NODE) {
        config_expected(p, n, path, "a mapping with zone, weight and match");
        return -1;
    }
    for (pair = n->data.mapping.pairs.start;
        pair < n->data.mapping.pairs.top; pair++) {
        yaml_node_t *kn = yaml_document_get_node(p->doc, pair->key);
        yaml_node_t *vn = yaml_document_get_node(p->doc, pair->value);

        if ((name = config_scalar(p, kn, path, "a key name")) == NULL)
            continue;
        config_path(kpath, sizeof(kpath), path, name);
        if (strcmp(name, "zone") == 0) {
            config_dnsbl_zone(p, vn, kpath, z);
        } else if (strcmp(name, "weight") == 0) {
            config_dnsbl_weight(p, vn, kpath, z);
        } else if (strcmp(name, "match") == 0) {
            config_dnsbl_match(p, vn, kpath, z);
        } else {
            config_addf(p, &kn->start_mark, "%s: unknown key %s (expected "
                "one of: zone, weight, match)", kpath,
                config_found(kn, show, sizeof(show)));
        }
    }
    if (z->zone == NULL && p->nerr == before)
        config_addf(p, &n->start_mark, "%s.zone: required key is missing",
            path);
    return p->nerr != before ? -1 : 0;
}


/* screen.dnsbl: a sequence of lists; a zone once. */
void
config_set_dnsbl(struct config_parse *p, const yaml_node_t *n,
    const char *path)
{
    struct config       *cfg = p->cfg;
    struct config_dnsbl *z;
    char                 ipath[CONFIG_PATH_MAX];
    long                 i, j, cnt;
    size_t               nz = 0;
    int                  bad = 0;

    cnt = config_seq_len(p, n, path, "a sequence of {zone, weight, match}");
    if (cnt < 0)
        return;
    if (cnt > CONFIG_DNSBL_MAX) {
        config_addf(p, &n->start_mark, "%s: at most %d lists", path,
            CONFIG_DNSBL_MAX);
        return;
    }
    z = xcalloc(cnt ? (size_t)cnt : 1, sizeof(*z));
    for (i = 0; i < cnt; i++) {
        yaml_node_t *it = config_item(p, n, i);

        config_ipath(ipath, sizeof(ipath), path, i);
        if (config_dnsbl_entry(p, it, ipath, &z[nz]) != 0) {
            config_dnsbl_clear(&z[nz]);
            bad = 1;
            continue;
        }
        for (j = 0; j < (long)nz; j++)
            if (strcmp(z[j].zone, z[nz].zone) == 0)
                break;
        if (j < (long)nz) {
            config_addf(p, &it->start_mark, "%s: zone %s is listed twice "
                "(also %s[%ld])", ipath, z[nz].zone, path, j);
            config_dnsbl_clear(&z[nz]);
            bad = 1;
            continue;
        }
        nz++;
    }
    if (bad) {
        config_free_dnsbl(z, nz);
        return;
    }
    config_free_dnsbl(cfg->screen_dnsbl, cfg->nscreen_dnsbl);
    cfg->screen_dnsbl = z;
    cfg->nscreen_dnsbl = nz;
}


void
config_free_domains(struct config_domains *d)
{
    size_t i;

    for (i = 0; i < d->n; i++)
        free(d->v[i]);
    free(d->v);
    d->v = NULL;
    d->n = 0;
}


/* greylist.allow_*_domains: a sequence of domain names, lower-cased, a
 * final dot dropped; a bad item is named by line and nothing is set. */
void
config_set_domains(struct config_parse *p, const struct config_key *k,
    const yaml_node_t *n, const char *path)
{
    static const char what[] = "a domain name like example.org";
    struct config_domains *dst = config_field(p, k), d = { NULL, 0 };
    char                   ipath[CONFIG_PATH_MAX];
    const char            *v;
    long                   i, cnt;
    size_t                 len, j;
    int                    bad = 0;

    cnt = config_seq_len(p, n, path, "a sequence of domain names like "
        "[example.org, example.net]");
    if (cnt < 0)
        return;
    d.v = xcalloc(cnt > 0 ? (size_t)cnt : 1, sizeof(*d.v));
    for (i = 0; i < cnt; i++) {
        yaml_node_t *it = config_item(p, n, i);

        config_ipath(ipath, sizeof(ipath), path, i);
        if ((v = config_scalar(p, it, ipath, what)) == NULL) {
            bad = 1;
            continue;
        }
        len = strlen(v);
        if (len > 0 && v[len - 1] == '.')
            len--;
        if (len == 0 || len > 253 || !config_valid_hostname(v)) {
            config_expected(p, it, ipath, what);
            bad = 1;
            continue;
        }
        d.v[d.n] = xstrdup(v);
        d.v[d.n][len] = '\0';
        for (j = 0; j < len; j++)
            if (d.v[d.n][j] >= 'A' && d.v[d.n][j] <= 'Z')
                d.v[d.n][j] = (char)(d.v[d.n][j] - 'A' + 'a');
        d.n++;
    }
    if (bad) {
        config_free_domains(&d);
        return;
    }
    config_free_domains(dst);
    *dst = d;
}
