/*
 * config_util.c - the helpers every section handler of config/ uses:
 * error lines (config_addf and the "expected X, found Y" messages),
 * key paths, scalars, integers, durations, sequences and CIDR lists.
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

/* Append one message line. */
void __attribute__((format(printf, 3, 4)))
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

int
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
const char *
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

void
config_expected(struct config_parse *p, const yaml_node_t *n, const char *path,
    const char *what)
{
    char show[CONFIG_SHOW_MAX + 8];

    config_addf(p, &n->start_mark, "%s: expected %s, got %s", path, what,
        config_found(n, show, sizeof(show)));
}

/* The text of a non-empty scalar, or NULL after reporting what was found. */
const char *
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
void
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
void
config_ipath(char *buf, size_t bufsz, const char *path, long i)
{
    char idx[32];
    size_t o;

    (void)snprintf(idx, sizeof(idx), "[%ld]", i);
    o = util_strlcpy(buf, path, bufsz);
    if (o < bufsz)
        (void)util_strlcpy(buf + o, idx, bufsz - o);
}

void *
config_field(struct config_parse *p, const struct config_key *k)
{
    return (char *)p->cfg + k->off;
}

void
config_set_str(char **dst, const char *v)
{
    free(*dst);
    *dst = xstrdup(v);
}

int
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
int
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

int
config_ncpu(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);

    if (n < 1)
        return 1;
    return n > STATUS_MAX_WORKERS ? STATUS_MAX_WORKERS : (int)n;
}

void
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
long
config_seq_len(struct config_parse *p, const yaml_node_t *n, const char *path,
    const char *what)
{
    if (n->type != YAML_SEQUENCE_NODE) {
        config_expected(p, n, path, what);
        return -1;
    }
    return n->data.sequence.items.top - n->data.sequence.items.start;
}

yaml_node_t *
config_item(struct config_parse *p, const yaml_node_t *seq, long i)
{
    return yaml_document_get_node(p->doc, seq->data.sequence.items.start[i]);
}

/* config_parse_cidrs - a sequence of networks into *out (malloc'd) and
 * *nout; -1 after reporting every bad item (then *out is untouched). */
int
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

void
config_set_cidrs(struct config_parse *p, const yaml_node_t *n,
    const char *path)
{
    (void)config_parse_cidrs(p, n, path, &p->cfg->allow_networks,
        &p->cfg->nallow_networks);
}
