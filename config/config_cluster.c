/*
 * config_cluster.c - the cluster section: the Redis addresses (and the
 * Sentinel's), and the checks after the walk (cluster/cluster.h,
 * docs/SCALING.md).
 *
 * CONTRACT  cluster.redis and cluster.sentinel.addresses take a list of
 *           entries (or one string, entries split at commas), each an IP
 *           literal with a port ("127.0.0.1:6379", "[::1]:6379") or an
 *           absolute unix socket path; they are kept joined by ",".
 *           The cluster is on when either is given (a section without
 *           them is off, as "mtad -n" prints it); Sentinel needs its
 *           master_name.  The password file must be a regular file that
 *           neither its group nor the world may read (it is read by the
 *           master, as root, at start).
 */
#include <sys/socket.h>
#include <sys/stat.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "common/util.h"
#include "config/config.h"
#include "config/config_int.h"

static const char addrs_what[] = "Redis addresses like \"127.0.0.1:6379\", "
    "\"[::1]:6379\" or \"/run/redis/redis.sock\"";

/* config_cluster_addr_ok - one entry: host:port (an IP literal) or /path */
static int
config_cluster_addr_ok(const char *s)
{
    struct sockaddr_storage ss;
    socklen_t               len;

    if (s[0] == '/')
        return strlen(s) < 108 && strchr(s, ',') == NULL;
    return util_parse_hostport(s, &ss, &len) == 0;
}

/* config_cluster_join - append entry (trimmed) to *joined. */
static int
config_cluster_join(char **joined, const char *b, size_t n)
{
    char   one[128];
    size_t have = *joined ? strlen(*joined) : 0;

    while (n > 0 && (*b == ' ' || *b == '\t'))
        b++, n--;
    while (n > 0 && (b[n - 1] == ' ' || b[n - 1] == '\t'))
        n--;
    if (n == 0 || n >= sizeof(one))
        return -1;
    memcpy(one, b, n);
    one[n] = '\0';
    if (!config_cluster_addr_ok(one))
        return -1;
    *joined = xrealloc(*joined, have + n + 2);
    if (have)
        (*joined)[have++] = ',';
    memcpy(*joined + have, one, n + 1);
    return 0;
}

void
config_set_cluster_addrs(struct config_parse *p, const struct config_key *k,
    const yaml_node_t *n, const char *path)
{
    char      **dst = config_field(p, k), ipath[CONFIG_PATH_MAX];
    char       *joined = NULL;
    const char *v, *q;
    long        i, cnt;

    if (n->type == YAML_SCALAR_NODE) {
        if ((v = config_scalar(p, n, path, addrs_what)) == NULL)
            return;
        for (q = v;; q++) {
            size_t m = strcspn(q, ",");

            if (config_cluster_join(&joined, q, m) < 0) {
                config_expected(p, n, path, addrs_what);
                free(joined);
                return;
            }
            q += m;
            if (*q == '\0')
                break;
        }
    } else {
        if ((cnt = config_seq_len(p, n, path, addrs_what)) <= 0) {
            if (cnt == 0)
                config_expected(p, n, path, addrs_what);
            return;
        }
        for (i = 0; i < cnt; i++) {
            yaml_node_t *it = config_item(p, n, i);

            config_ipath(ipath, sizeof(ipath), path, i);
            if (it == NULL || (v = config_scalar(p, it, ipath,
                addrs_what)) == NULL) {
                free(joined);
                return;
            }
            if (config_cluster_join(&joined, v, strlen(v)) < 0) {
                config_expected(p, it, ipath, addrs_what);
                free(joined);
                return;
            }
        }
    }
    free(*dst);
    *dst = joined;
}

/* config_check_cluster - after the walk: Sentinel's name,
 * the password file's mode, a key prefix without spaces. */
void
config_check_cluster(struct config_parse *p)
{
    struct config     *cfg = p->cfg;
    const yaml_mark_t *at = p->have_cluster_mark ? &p->cluster_mark : NULL;
    struct stat        st;

    if (!p->have_cluster_mark)
        return;
    if (cfg->cluster_sentinel != NULL && cfg->cluster_sentinel_master == NULL)
        config_addf(p, at, "cluster.sentinel.master_name: required with "
            "cluster.sentinel.addresses");
    if (cfg->cluster_tls)
        config_addf(p, at, "cluster.tls: this build's hiredis (0.14) has no "
            "TLS; reach Redis over a unix socket or a local TLS tunnel "
            "(docs/SCALING.md)");
    if (cfg->cluster_key_prefix != NULL &&
        strpbrk(cfg->cluster_key_prefix, " \t\r\n{}") != NULL)
        config_addf(p, at, "cluster.key_prefix: no spaces or braces");
    if (cfg->cluster_node_id != NULL &&
        (strlen(cfg->cluster_node_id) > 63 ||
        strpbrk(cfg->cluster_node_id, " \t\r\n:,{}") != NULL))
        config_addf(p, at, "cluster.node_id: at most 63 characters, no "
            "spaces, ':', ',' or braces");
    if (cfg->cluster_sync_ms > 10000)
        config_addf(p, at, "cluster.sync_interval: at most 10s");
    if (cfg->cluster_password_file == NULL)
        return;
    at = p->have_cluster_pw_mark ? &p->cluster_pw_mark : at;
    if (stat(cfg->cluster_password_file, &st) != 0) {
        if (errno != EACCES)    /* mtactl check as a user: not its file */
            config_addf(p, at, "cluster.password_file: %s: %s",
                cfg->cluster_password_file, strerror(errno));
    } else if (!S_ISREG(st.st_mode))
        config_addf(p, at, "cluster.password_file: %s: not a regular file",
            cfg->cluster_password_file);
    else if (st.st_mode & 077)
        config_addf(p, at, "cluster.password_file: %s: readable by its "
            "group or others (mode %03o): chmod 600 it",
            cfg->cluster_password_file, (unsigned)(st.st_mode & 0777));
}
