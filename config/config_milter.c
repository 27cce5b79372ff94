/*
 * config_milter.c - a listener's milters: a sequence of {name, socket,
 * timeouts: {connect, command, eom}, default_action, skip}, as Postfix's
 * smtpd_milters, milter_*_timeout and milter_default_action.
 *
 * SOCKETS   inet:IP:port only (an address, no name: nothing may block on a
 *           lookup).  unix: sockets are refused with the reason: the
 *           workers' seccomp filter denies them new AF_UNIX sockets, and
 *           cannot tell one path from another.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "common/util.h"
#include "config/config.h"
#include "config/config_int.h"

#define CONFIG_MILTER_MAX  8

/* Postfix's defaults: milter_connect_timeout, milter_command_timeout,
 * milter_content_timeout */
#define CONFIG_MILTER_CONNECT_MS   (30 * 1000)
#define CONFIG_MILTER_COMMAND_MS   (30 * 1000)
#define CONFIG_MILTER_EOM_MS       (300 * 1000)

/* skip: the steps a milter is never sent (SMFIP_NO* bits) */
static const struct { const char *name; uint32_t bit; } config_milter_steps[] = {
    { "connect", 0x01 }, { "helo", 0x02 }, { "mail", 0x04 },
    { "rcpt", 0x08 }, { "body", 0x10 }, { "headers", 0x20 },
    { "eoh", 0x40 }, { "data", 0x200 }
};
#define CONFIG_MILTER_NSTEPS \
    (sizeof(config_milter_steps) / sizeof(config_milter_steps[0]))


static void
config_milter_clear(struct config_milter *m)
{
    free(m->name);
    free(m->socket);
    memset(m, 0, sizeof(*m));
}


void
config_free_milters(struct config_milter *m, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        config_milter_clear(&m[i]);
    free(m);
}


static void
config_milter_socket(struct config_parse *p, yaml_node_t *vn,
    const char *kpath, struct config_milter *m)
{
    static const char what[] = "inet:IP:port like inet:127.0.0.1:11332";
    const char             *v = config_scalar(p, vn, kpath, what);
    struct sockaddr_storage ss;
    socklen_t               len;

    if (v == NULL)
        return;
    if (strncmp(v, "unix:", 5) == 0) {
        config_addf(p, &vn->start_mark, "%s: unix sockets are not "
            "supported (the workers' sandbox denies them new unix "
            "sockets): use %s", kpath, what);
        return;
    }
    if (strncmp(v, "inet:", 5) != 0 ||
        util_parse_hostport(v + 5, &ss, &len) != 0) {
        config_expected(p, vn, kpath, what);
        return;
    }
    config_set_str(&m->socket, v);
}


static void
config_milter_timeouts(struct config_parse *p, yaml_node_t *n,
    const char *path, struct config_milter *m)
{
    static const struct config_key k = { "t", CONFIG_DURATION, 0, 1, 0,
        NULL };
    yaml_node_pair_t *pair;
    char              kpath[CONFIG_PATH_MAX], show[CONFIG_SHOW_MAX + 8];
    const char       *name;

    if (n->type != YAML_MAPPING_NODE) {
        config_expected(p, n, path, "a mapping with connect, command, eom");
        return;
    }
    for (pair = n->data.mapping.pairs.start;
        pair < n->data.mapping.pairs.top; pair++) {
        yaml_node_t *kn = yaml_document_get_node(p->doc, pair->key);
        yaml_node_t *vn = yaml_document_get_node(p->doc, pair->value);

        if ((name = config_scalar(p, kn, path, "a key name")) == NULL)
            continue;
        config_path(kpath, sizeof(kpath), path, name);
        if (strcmp(name, "connect") == 0)
            config_set_duration(p, &k, vn, kpath, &m->connect_ms);
        else if (strcmp(name, "command") == 0)
            config_set_duration(p, &k, vn, kpath, &m->command_ms);
        else if (strcmp(name, "eom") == 0)
            config_set_duration(p, &k, vn, kpath, &m->eom_ms);
        else
            config_addf(p, &kn->start_mark, "%s: unknown key %s (expected "
                "one of: connect, command, eom)", kpath,
                config_found(kn, show, sizeof(show)));
    }
}


static void
config_milter_skip(struct config_parse *p, yaml_node_t *n, const char *path,
    struct config_milter *m)
{
    static const char what[] = "a step: connect, helo, mail, rcpt, data, "
        "headers, eoh or body";
    char     ipath[CONFIG_PATH_MAX];
    long     i, cnt;
    size_t   j;

    cnt = config_seq_len(p, n, path, "a sequence of steps like [connect, "
        "helo]");
    for (i = 0; i < cnt; i++) {
        yaml_node_t *it = config_item(p, n, i);
        const char  *v;

        config_ipath(ipath, sizeof(ipath), path, i);
        if ((v = config_scalar(p, it, ipath, what)) == NULL)
            continue;
        for (j = 0; j < CONFIG_MILTER_NSTEPS; j++)
            if (strcmp(v, config_milter_steps[j].name) == 0)
                break;
        if (j == CONFIG_MILTER_NSTEPS)
            config_expected(p, it, ipath, what);
        else
            m->proto_off |= config_milter_steps[j].bit;
    }
}


static void
config_milter_action(struct config_parse *p, yaml_node_t *vn,
    const char *kpath, struct config_milter *m)
{
    static const char what[] = "tempfail or accept";
    const char *v = config_scalar(p, vn, kpath, what);

    if (v == NULL)
        return;
    if (strcmp(v, "tempfail") == 0)
        m->default_accept = 0;
    else if (strcmp(v, "accept") == 0)
        m->default_accept = 1;
    else
        config_expected(p, vn, kpath, what);
}


static void
config_milter_name(struct config_parse *p, yaml_node_t *vn,
    const char *kpath, struct config_milter *m)
{
    static const char what[] = "a name of letters, digits, '-', '_', '.'";
    const char *v = config_scalar(p, vn, kpath, what);
    size_t      i;

    if (v == NULL)
        return;
    for (i = 0; v[i] != '\0'; i++)
        if (!((v[i] >= 'a' && v[i] <= 'z') || (v[i] >= 'A' && v[i] <= 'Z') ||
            (v[i] >= '0' && v[i] <= '9') || strchr("-_.", v[i]) != NULL))
            break;
    if (i == 0 || v[i] != '\0' || i > 40) {
        config_expected(p, vn, kpath, what);
        return;
    }
    config_set_str(&m->name, v);
}


/* config_milter_entry - one milters item; -1 after errors. */
static int
config_milter_entry(struct config_parse *p, yaml_node_t *n, const char *path,
    struct config_milter *m)
{
    yaml_node_pair_t *pair;
    char              kpath[CONFIG_PATH_MAX], show[CONFIG_SHOW_MAX + 8];
    const char       *name;
    int               before = p->nerr;

    m->connect_ms = CONFIG_MILTER_CONNECT_MS;
    m->command_ms = CONFIG_MILTER_COMMAND_MS;
    m->eom_ms = CONFIG_MILTER_EOM_MS;
    if (n->type != YAML_MAPPING_NODE) {
        config_expected(p, n, path, "a mapping with name and socket");
        return -1;
    }
    for (pair = n->data.mapping.pairs.start;
        pair < n->data.mapping.pairs.top; pair++) {
        yaml_node_t *kn = yaml_document_get_node(p->doc, pair->key);
        yaml_node_t *vn = yaml_document_get_node(p->doc, pair->value);

        if ((name = config_scalar(p, kn, path, "a key name")) == NULL)
            continue;
        config_path(kpath, sizeof(kpath), path, name);
        if (strcmp(name, "name") == 0)
            config_milter_name(p, vn, kpath, m);
        else if (strcmp(name, "socket") == 0)
            config_milter_socket(p, vn, kpath, m);
        else if (strcmp(name, "timeouts") == 0)
            config_milter_timeouts(p, vn, kpath, m);
        else if (strcmp(name, "default_action") == 0)
            config_milter_action(p, vn, kpath, m);
        else if (strcmp(name, "skip") == 0)
            config_milter_skip(p, vn, kpath, m);
        else
            config_addf(p, &kn->start_mark, "%s: unknown key %s (expected "
                "one of: name, socket, timeouts, default_action, skip)",
                kpath, config_found(kn, show, sizeof(show)));
    }
    if (p->nerr == before && m->name == NULL)
        config_addf(p, &n->start_mark, "%s.name: required key is missing",
            path);
    else if (p->nerr == before && m->socket == NULL)
        config_addf(p, &n->start_mark, "%s.socket: required key is "
            "missing", path);
    return p->nerr != before ? -1 : 0;
}


/* A listener's milters: -1 after errors (*out untouched). */
int
config_set_milters(struct config_parse *p, const yaml_node_t *n,
    const char *path, struct config_milter **out, size_t *nout)
{
    struct config_milter *m;
    char                  ipath[CONFIG_PATH_MAX];
    long                  i, j, cnt;
    size_t                nm = 0;
    int                   bad = 0;

    cnt = config_seq_len(p, n, path, "a sequence of {name, socket, ...}");
    if (cnt < 0)
        return -1;
    if (cnt > CONFIG_MILTER_MAX) {
        config_addf(p, &n->start_mark, "%s: at most %d milters", path,
            CONFIG_MILTER_MAX);
        return -1;
    }
    m = xcalloc(cnt ? (size_t)cnt : 1, sizeof(*m));
    for (i = 0; i < cnt; i++) {
        yaml_node_t *it = config_item(p, n, i);

        config_ipath(ipath, sizeof(ipath), path, i);
        if (config_milter_entry(p, it, ipath, &m[nm]) != 0) {
            config_milter_clear(&m[nm]);
            bad = 1;
            continue;
        }
        for (j = 0; j < (long)nm; j++)
            if (strcmp(m[j].name, m[nm].name) == 0)
                break;
        if (j < (long)nm) {
            config_addf(p, &it->start_mark, "%s: milter %s is listed twice "
                "(also %s[%ld])", ipath, m[nm].name, path, j);
            config_milter_clear(&m[nm]);
            bad = 1;
            continue;
        }
        nm++;
    }
    if (bad) {
        config_free_milters(m, nm);
        return -1;
    }
    *out = m;
    *nout = nm;
    return 0;
}
