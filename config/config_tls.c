/*
 * config_tls.c - the tls section: cert/key file lists, versions, and the
 * checks made after the walk (files readable, each key matches its
 * certificate, ciphers accepted by OpenSSL).
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

#include <limits.h>
#include "common/log.h"
#include "common/safefs.h"
#include "common/status.h"
#include "common/util.h"
#include "proxy/proxy.h"
#include "router/route.h"
#include "dkim/dkim.h"
#include "config/config.h"
#include "config/config_int.h"

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
void
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
 * root at load), after safefs_check_read(): root reads keys and
 * certificates only from directories no other user can change; a message
 * and -1 when it cannot be read. */
static int
config_tls_readable(struct config_parse *p, const yaml_mark_t *mark,
    const char *key, const char *file)
{
    char  err[PATH_MAX + 160];
    FILE *fp;

    if (safefs_check_read(file, key, err, sizeof(err)) != 0) {
        config_addf(p, mark, "%s", err);
        return -1;
    }
    if ((fp = fopen(file, "r")) == NULL) {
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
/* config_check_ca - tls.ca_file: readable, and PEM certificates that
 * OpenSSL loads (the workers load it before their sandbox). */
static void
config_check_ca(struct config_parse *p)
{
    const char *ca = p->cfg->tls_ca_file;
    char        why[256];
    SSL_CTX    *ctx;

    if (ca == NULL ||
        config_tls_readable(p, &p->tls_ca_mark, "tls.ca_file", ca) < 0)
        return;
    ERR_clear_error();
    if ((ctx = SSL_CTX_new(TLS_client_method())) == NULL) {
        config_addf(p, &p->tls_ca_mark, "tls.ca_file: cannot set up TLS: %s",
            config_ssl_err(why, sizeof(why)));
        return;
    }
    if (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1)
        config_addf(p, &p->tls_ca_mark, "tls.ca_file: no usable PEM "
            "certificate in '%s': %s", ca, config_ssl_err(why, sizeof(why)));
    ERR_clear_error();
    SSL_CTX_free(ctx);
}


void
config_check_tls(struct config_parse *p)
{
    struct config *cfg = p->cfg;
    int types[CONFIG_TLS_MAX_CERTS];
    SSL_CTX *ctx;
    size_t i, j;
    int bad = 0;

    config_check_ca(p);
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
