/*
 * config_dkim.c - the dkim section: dkim.sign entries (domain, selector,
 * key file, checked with dkim/) and the sign_networks default.
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
#include "common/safefs.h"
#include "common/status.h"
#include "common/util.h"
#include "proxy/proxy.h"
#include "router/route.h"
#include "dkim/dkim.h"
#include "config/config.h"
#include "config/config_int.h"

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
    if (safefs_check_read(k->key_file, "key_file", why, sizeof(why)) != 0) {
        config_addf(p, &key_node->start_mark, "%s.%s", path, why);
        return -1;
    }
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


void
config_free_dkim(struct config_dkim_key *k, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        config_dkim_clear(&k[i]);
    free(k);
}


/* dkim.sign: a sequence of entries; one (domain, selector) pair once. */
void
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
void
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
