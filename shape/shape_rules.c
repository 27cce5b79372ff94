/*
 * shape_rules.c - the shaping rules (shape.h): relay.yaml's shaping:
 * section and its rules_file, read with libyaml; sites and precedence.
 *
 * PURPOSE   shaping: { rules_file, defaults, sites, backoff }.  defaults
 *           and each site block carry limit keys (connections,
 *           messages_per_connection, recipients_per_message,
 *           deliveries_per_second|minute|hour, burst, new_connections,
 *           new_connections_interval); a site block also matches (mx:
 *           host names, ".suffix" or globs; domains:), may be named
 *           (name:), may override per source (sources: { NAME: {limit
 *           keys} }) and may have its own back-off rules (backoff:).  The
 *           rules file has the same keys at its top level (or under
 *           shaping:); its defaults override relay.yaml's key by key, its
 *           sites come first, its back-off rules before relay.yaml's.
 * PRECEDENCE The most specific matching block wins: a listed domain, then
 *           an exact MX host, then the longest ".suffix", then the glob
 *           with the most literal characters; its unset keys come from
 *           defaults, a source's keys override the block's.
 * FAILURE   The first problems, "file:line:col: message", at most a few,
 *           in err; nothing is kept from a bad load.
 */
#include <ctype.h>
#include <errno.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <yaml.h>

#include "common/util.h"
#include "shape/shape.h"
#include "shape/shape_int.h"

struct sr_parse {
    const char       *file;
    yaml_document_t  *doc;
    char             *err;
    size_t            errsz, errlen;
    int               nerr;
    struct shape_rules *r;
    char              rules_file[1024];
    yaml_mark_t       rules_mark;
};

/* ---- errors and scalars ---- */

static void
sr_err(struct sr_parse *p, const yaml_node_t *n, const char *fmt, ...)
{
    va_list ap;
    int     k;

    if (p->nerr++ >= 4 || p->errlen + 2 >= p->errsz)
        return;
    k = snprintf(p->err + p->errlen, p->errsz - p->errlen, "%s%s:%zu:%zu: ",
        p->errlen ? "; " : "", p->file, n->start_mark.line + 1,
        n->start_mark.column + 1);
    if (k > 0)
        p->errlen += (size_t)k < p->errsz - p->errlen ? (size_t)k :
            p->errsz - p->errlen - 1;
    va_start(ap, fmt);
    k = vsnprintf(p->err + p->errlen, p->errsz - p->errlen, fmt, ap);
    va_end(ap);
    if (k > 0)
        p->errlen += (size_t)k < p->errsz - p->errlen ? (size_t)k :
            p->errsz - p->errlen - 1;
}

static yaml_node_t *
sr_node(struct sr_parse *p, int id)
{
    return yaml_document_get_node(p->doc, id);
}

static const char *
sr_scalar(struct sr_parse *p, yaml_node_t *n, const char *what)
{
    if (n == NULL || n->type != YAML_SCALAR_NODE) {
        if (n != NULL)
            sr_err(p, n, "%s: expected a single value", what);
        return NULL;
    }
    return (const char *)n->data.scalar.value;
}

static int
sr_uint(struct sr_parse *p, yaml_node_t *n, const char *what, uint32_t *out)
{
    const char   *s = sr_scalar(p, n, what);
    char         *end;
    unsigned long v;

    if (s == NULL)
        return -1;
    errno = 0;
    v = strtoul(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || s[0] == '-' ||
        v > 100000000UL) {
        sr_err(p, n, "%s: expected a number from 0 to 100000000, not "
            "\"%.40s\"", what, s);
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

static int
sr_dur(struct sr_parse *p, yaml_node_t *n, const char *what, uint64_t *out)
{
    const char *s = sr_scalar(p, n, what);

    if (s == NULL)
        return -1;
    if (util_parse_duration(s, out) < 0) {
        sr_err(p, n, "%s: expected a duration (30s, 5m, 1h), not \"%.40s\"",
            what, s);
        return -1;
    }
    return 0;
}

/* "0.5" or "50%": per mille, 1..1000. */
static int
sr_factor(struct sr_parse *p, yaml_node_t *n, uint32_t *out)
{
    const char *s = sr_scalar(p, n, "factor");
    char       *end;
    double      v;

    if (s == NULL)
        return -1;
    v = strtod(s, &end);
    if (end != s && *end == '%' && end[1] == '\0')
        v /= 100.0;
    else if (end == s || *end != '\0')
        v = -1;
    if (!(v > 0 && v <= 1)) {
        sr_err(p, n, "factor: expected a fraction of the rate (0.5 or 50%%), "
            "not \"%.40s\"", s);
        return -1;
    }
    *out = (uint32_t)(v * 1000 + 0.5);
    if (*out == 0)
        *out = 1;
    return 0;
}

/* "60/m", "10/s", "1000/h", "5/30s": n per period. */
static int
sr_rate(struct sr_parse *p, yaml_node_t *n, const char *what,
    struct shape_rate *out)
{
    const char   *s = sr_scalar(p, n, what), *slash;
    char         *end;
    unsigned long v;
    uint64_t      per = 0;

    if (s == NULL)
        return -1;
    v = strtoul(s, &end, 10);
    slash = end;
    if (end == s || *slash != '/' || v == 0 || v > 100000000UL)
        goto bad;
    if (strcmp(slash + 1, "s") == 0)
        per = 1000;
    else if (strcmp(slash + 1, "m") == 0)
        per = 60000;
    else if (strcmp(slash + 1, "h") == 0)
        per = 3600000;
    else if (util_parse_duration(slash + 1, &per) < 0 || per == 0)
        goto bad;
    out->n = (uint32_t)v;
    out->per_ms = per;
    return 0;
bad:
    sr_err(p, n, "%s: expected a rate (60/m, 10/s, 5/30s), not \"%.40s\"",
        what, s);
    return -1;
}

/* A mapping's pairs: fn(key, value) for each; a duplicate is an error. */
typedef void sr_pair_fn(struct sr_parse *p, const char *key,
            yaml_node_t *kn, yaml_node_t *vn, void *arg);

static void
sr_each(struct sr_parse *p, yaml_node_t *n, const char *what,
    sr_pair_fn *fn, void *arg)
{
    yaml_node_pair_t *pair, *prev;

    if (n->type == YAML_SCALAR_NODE && n->data.scalar.length == 0)
        return;                         /* "defaults:" left empty */
    if (n->type != YAML_MAPPING_NODE) {
        sr_err(p, n, "%s: expected a mapping of keys", what);
        return;
    }
    for (pair = n->data.mapping.pairs.start;
        pair < n->data.mapping.pairs.top; pair++) {
        yaml_node_t *kn = sr_node(p, pair->key), *vn = sr_node(p,
            pair->value);
        const char  *k = sr_scalar(p, kn, what);

        if (k == NULL)
            continue;
        for (prev = n->data.mapping.pairs.start; prev < pair; prev++) {
            yaml_node_t *pk = sr_node(p, prev->key);

            if (pk->type == YAML_SCALAR_NODE &&
                strcmp((const char *)pk->data.scalar.value, k) == 0)
                break;
        }
        if (prev < pair) {
            sr_err(p, kn, "%s.%s: duplicate key", what, k);
            continue;
        }
        fn(p, k, kn, vn, arg);
    }
}

/* ---- limits ---- */

static int
sr_lim_key(struct sr_parse *p, const char *k, yaml_node_t *vn,
    struct sr_lim *l)
{
    static const struct { const char *name; int r; unsigned bit;
        uint64_t per; } rates[] = {
        { "deliveries_per_second", SHAPE_R_SEC, L_SEC, 1000 },
        { "deliveries_per_minute", SHAPE_R_MIN, L_MIN, 60000 },
        { "deliveries_per_hour", SHAPE_R_HOUR, L_HOUR, 3600000 },
    };
    size_t i;

    for (i = 0; i < sizeof(rates) / sizeof(rates[0]); i++) {
        if (strcmp(k, rates[i].name) == 0) {
            if (sr_uint(p, vn, k, &l->l.rate[rates[i].r].n) == 0)
                l->set |= rates[i].bit;
            l->l.rate[rates[i].r].per_ms = rates[i].per;
            return 1;
        }
    }
#define SR_U(name, field, bit) \
    if (strcmp(k, name) == 0) { \
        if (sr_uint(p, vn, k, &l->l.field) == 0) \
            l->set |= bit; \
        return 1; \
    }
    SR_U("connections", connections, L_CONNS)
    SR_U("messages_per_connection", messages_per_connection, L_MPC)
    SR_U("recipients_per_message", recipients_per_message, L_RPM)
    SR_U("burst", burst, L_BURST)
    SR_U("new_connections", rate[SHAPE_R_CONN].n, L_NCONN)
#undef SR_U
    if (strcmp(k, "new_connections_interval") == 0) {
        if (sr_dur(p, vn, k, &l->l.rate[SHAPE_R_CONN].per_ms) == 0)
            l->set |= L_NCONN_IV;
        return 1;
    }
    return 0;
}

#define SR_LIMIT_KEYS "connections, messages_per_connection, " \
    "recipients_per_message, deliveries_per_second, deliveries_per_minute, " \
    "deliveries_per_hour, burst, new_connections, new_connections_interval"

static void
sr_lim_pair(struct sr_parse *p, const char *k, yaml_node_t *kn,
    yaml_node_t *vn, void *arg)
{
    if (!sr_lim_key(p, k, vn, arg))
        sr_err(p, kn, "unknown key %s (expected one of: %s)", k,
            SR_LIMIT_KEYS);
}

void
sr_lim_over_pub(struct shape_limits *to, const struct sr_lim *from)
{
    const struct shape_limits *f = &from->l;

    if (from->set & L_CONNS)
        to->connections = f->connections;
    if (from->set & L_MPC)
        to->messages_per_connection = f->messages_per_connection;
    if (from->set & L_RPM)
        to->recipients_per_message = f->recipients_per_message;
    if (from->set & L_BURST)
        to->burst = f->burst;
    if (from->set & L_SEC)
        to->rate[SHAPE_R_SEC] = f->rate[SHAPE_R_SEC];
    if (from->set & L_MIN)
        to->rate[SHAPE_R_MIN] = f->rate[SHAPE_R_MIN];
    if (from->set & L_HOUR)
        to->rate[SHAPE_R_HOUR] = f->rate[SHAPE_R_HOUR];
    if (from->set & L_NCONN)
        to->rate[SHAPE_R_CONN].n = f->rate[SHAPE_R_CONN].n;
    if (from->set & L_NCONN_IV)
        to->rate[SHAPE_R_CONN].per_ms = f->rate[SHAPE_R_CONN].per_ms;
}

static void
sr_lim_merge(struct sr_lim *to, const struct sr_lim *from)
{
    sr_lim_over_pub(&to->l, from);
    to->set |= from->set;
}

/* ---- back-off rules ---- */

static void
sr_bo_pair(struct sr_parse *p, const char *k, yaml_node_t *kn,
    yaml_node_t *vn, void *arg)
{
    struct sr_backoff *b = arg;
    const char        *s;

    if (strcmp(k, "code") == 0) {
        if ((s = sr_scalar(p, vn, k)) == NULL)
            return;
        b->code_digits = 0;
        b->code = 0;
        while (isdigit((unsigned char)s[b->code_digits]) &&
            b->code_digits < 3) {
            b->code = b->code * 10 + (s[b->code_digits] - '0');
            b->code_digits++;
        }
        if (b->code_digits == 0 || b->code < 2 ||
            strspn(s + b->code_digits, "xX") != 3u - (unsigned)b->code_digits
            || s[3] != '\0')
            sr_err(p, vn, "code: expected a reply code (421, 4xx, 45x), "
                "not \"%.20s\"", s);
    } else if (strcmp(k, "enhanced") == 0) {
        if ((s = sr_scalar(p, vn, k)) != NULL)
            util_strlcpy(b->enhanced, s, sizeof(b->enhanced));
    } else if (strcmp(k, "text") == 0) {
        int  rc;
        char msg[128];

        if ((s = sr_scalar(p, vn, k)) == NULL)
            return;
        rc = regcomp(&b->re, s, REG_EXTENDED | REG_ICASE | REG_NOSUB);
        if (rc != 0) {
            regerror(rc, &b->re, msg, sizeof(msg));
            sr_err(p, vn, "text: bad regular expression: %s", msg);
            return;
        }
        b->has_re = 1;
        b->text = xstrdup(s);
    } else if (strcmp(k, "class") == 0) {
        if ((s = sr_scalar(p, vn, k)) != NULL)
            util_strlcpy(b->cls, s, sizeof(b->cls));
    } else if (strcmp(k, "kind") == 0) {
        int i;

        if ((s = sr_scalar(p, vn, k)) == NULL)
            return;
        for (i = 0; i <= SHAPE_K_TIMEOUT; i++)
            if (strcmp(s, shape_kind_name((enum shape_kind)i)) == 0)
                b->kind = i;
        if (b->kind < 0)
            sr_err(p, vn, "kind: expected reply, connect, tls, dns or "
                "timeout, not \"%.20s\"", s);
    } else if (strcmp(k, "action") == 0) {
        if ((s = sr_scalar(p, vn, k)) == NULL)
            return;
        if (strcmp(s, "suspend") == 0)
            b->a.act = SHAPE_ACT_SUSPEND;
        else if (strcmp(s, "slow") == 0)
            b->a.act = SHAPE_ACT_SLOW;
        else if (strcmp(s, "bounce") == 0)
            b->a.act = SHAPE_ACT_BOUNCE;
        else
            sr_err(p, vn, "action: expected suspend, slow or bounce, not "
                "\"%.20s\"", s);
    } else if (strcmp(k, "for") == 0) {
        (void)sr_dur(p, vn, k, &b->a.for_ms);
    } else if (strcmp(k, "factor") == 0) {
        (void)sr_factor(p, vn, &b->a.factor);
    } else if (strcmp(k, "steps") == 0) {
        (void)sr_uint(p, vn, k, &b->a.steps);
    } else if (strcmp(k, "step") == 0) {
        (void)sr_dur(p, vn, k, &b->a.step_ms);
    } else if (strcmp(k, "base") == 0) {
        (void)sr_rate(p, vn, k, &b->a.base);
    } else {
        sr_err(p, kn, "backoff: unknown key %s (expected one of: code, "
            "enhanced, text, class, kind, action, for, factor, steps, step, "
            "base)", k);
    }
}

static void
sr_bo_list(struct sr_parse *p, yaml_node_t *n, struct sr_backoff **out,
    size_t *nout)
{
    yaml_node_item_t *it;

    if (n->type != YAML_SEQUENCE_NODE) {
        sr_err(p, n, "backoff: expected a list of rules");
        return;
    }
    for (it = n->data.sequence.items.start; it < n->data.sequence.items.top;
        it++) {
        yaml_node_t       *in = sr_node(p, *it);
        struct sr_backoff *b;

        *out = xrealloc(*out, (*nout + 1) * sizeof(**out));
        b = &(*out)[(*nout)++];
        memset(b, 0, sizeof(*b));
        b->kind = -1;
        b->a.factor = 500;
        b->a.for_ms = 5 * 60000;
        b->a.steps = 3;
        b->a.step_ms = 5 * 60000;
        b->a.base.n = 60;
        b->a.base.per_ms = 60000;
        b->a.rule = (int)*nout - 1;
        sr_each(p, in, "backoff", sr_bo_pair, b);
        if (b->a.act == SHAPE_ACT_NONE && in->type == YAML_MAPPING_NODE)
            sr_err(p, in, "backoff: a rule needs action: suspend, slow or "
                "bounce");
    }
}

static void
sr_bo_free(struct sr_backoff *b, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        if (b[i].has_re)
            regfree(&b[i].re);
        free(b[i].text);
    }
    free(b);
}

/* ---- site blocks ---- */

static void
sr_strings(struct sr_parse *p, yaml_node_t *n, const char *what,
    char **out, size_t *nout)
{
    yaml_node_item_t *it;
    const char       *s;

    if (n->type == YAML_SCALAR_NODE) {
        if ((s = sr_scalar(p, n, what)) != NULL && *nout < SR_MAX_PAT)
            out[(*nout)++] = xstrdup(s);
        return;
    }
    if (n->type != YAML_SEQUENCE_NODE) {
        sr_err(p, n, "%s: expected a list of names", what);
        return;
    }
    for (it = n->data.sequence.items.start; it < n->data.sequence.items.top;
        it++) {
        yaml_node_t *in = sr_node(p, *it);

        if ((s = sr_scalar(p, in, what)) == NULL)
            continue;
        if (*nout >= SR_MAX_PAT) {
            sr_err(p, in, "%s: at most %d names", what, SR_MAX_PAT);
            return;
        }
        out[(*nout)++] = xstrdup(s);
    }
}

static void
sr_src_pair(struct sr_parse *p, const char *k, yaml_node_t *kn,
    yaml_node_t *vn, void *arg)
{
    struct sr_block  *b = arg;
    struct sr_source *s;

    if (b->nsrc >= SR_MAX_SRC) {
        sr_err(p, kn, "sources: at most %d", SR_MAX_SRC);
        return;
    }
    s = &b->src[b->nsrc++];
    util_strlcpy(s->name, k, sizeof(s->name));
    sr_each(p, vn, "sources", sr_lim_pair, &s->lim);
}

static void
sr_block_pair(struct sr_parse *p, const char *k, yaml_node_t *kn,
    yaml_node_t *vn, void *arg)
{
    struct sr_block *b = arg;
    const char      *s;

    if (strcmp(k, "name") == 0) {
        if ((s = sr_scalar(p, vn, k)) == NULL)
            return;
        if (strlen(s) >= SHAPE_NAME_MAX || s[0] == '\0' ||
            strpbrk(s, " \t\r\n\"\\") != NULL)
            sr_err(p, vn, "name: a site name is one word of at most %d "
                "characters", SHAPE_NAME_MAX - 1);
        else
            util_strlcpy(b->name, s, sizeof(b->name));
    } else if (strcmp(k, "mx") == 0) {
        sr_strings(p, vn, k, b->mx, &b->nmx);
    } else if (strcmp(k, "domains") == 0) {
        sr_strings(p, vn, k, b->dom, &b->ndom);
    } else if (strcmp(k, "sources") == 0) {
        sr_each(p, vn, "sources", sr_src_pair, b);
    } else if (strcmp(k, "backoff") == 0) {
        sr_bo_list(p, vn, &b->bo, &b->nbo);
    } else if (!sr_lim_key(p, k, vn, &b->lim)) {
        sr_err(p, kn, "sites: unknown key %s (expected one of: name, mx, "
            "domains, sources, backoff, %s)", k, SR_LIMIT_KEYS);
    }
}

static void
sr_sites(struct sr_parse *p, yaml_node_t *n)
{
    yaml_node_item_t *it;

    if (n->type != YAML_SEQUENCE_NODE) {
        sr_err(p, n, "sites: expected a list of site blocks");
        return;
    }
    for (it = n->data.sequence.items.start; it < n->data.sequence.items.top;
        it++) {
        yaml_node_t     *in = sr_node(p, *it);
        struct sr_block *b;

        p->r->blocks = xrealloc(p->r->blocks, (p->r->nblocks + 1) *
            sizeof(*p->r->blocks));
        b = &p->r->blocks[p->r->nblocks++];
        memset(b, 0, sizeof(*b));
        sr_each(p, in, "sites", sr_block_pair, b);
        if (in->type == YAML_MAPPING_NODE && b->nmx == 0 && b->ndom == 0)
            sr_err(p, in, "sites: a block matches nothing (give mx: or "
                "domains:)");
    }
}

/* ---- the top ---- */

static void
sr_top_pair(struct sr_parse *p, const char *k, yaml_node_t *kn,
    yaml_node_t *vn, void *arg)
{
    const char *s;
    int         main_file = arg != NULL;

    if (strcmp(k, "rules_file") == 0 && main_file) {
        if ((s = sr_scalar(p, vn, k)) != NULL) {
            util_strlcpy(p->rules_file, s, sizeof(p->rules_file));
            p->rules_mark = vn->start_mark;
        }
    } else if (strcmp(k, "defaults") == 0) {
        struct sr_lim l;

        memset(&l, 0, sizeof(l));
        sr_each(p, vn, "defaults", sr_lim_pair, &l);
        sr_lim_merge(&p->r->defaults, &l);
    } else if (strcmp(k, "sites") == 0) {
        sr_sites(p, vn);
    } else if (strcmp(k, "backoff") == 0) {
        sr_bo_list(p, vn, &p->r->bo, &p->r->nbo);
    } else {
        sr_err(p, kn, "shaping: unknown key %s (expected one of: %sdefaults, "
            "sites, backoff)", k, main_file ? "rules_file, " : "");
    }
}

/* sr_doc - parse one YAML text; main: relay.yaml (shaping: under the top,
 * rules_file allowed), else a rules file.  0 when a shaping section was
 * there (or the file is a rules file), 1 when relay.yaml has none, -1. */
static int
sr_doc(struct sr_parse *p, const char *text, size_t len, int main)
{
    yaml_parser_t    y;
    yaml_document_t  doc;
    yaml_node_t     *root, *sec = NULL;
    yaml_node_pair_t *pair;
    int              rc = 0;

    if (!yaml_parser_initialize(&y))
        return -1;
    yaml_parser_set_input_string(&y, (const unsigned char *)text, len);
    if (!yaml_parser_load(&y, &doc)) {
        snprintf(p->err, p->errsz, "%s:%zu:%zu: %s", p->file,
            y.problem_mark.line + 1, y.problem_mark.column + 1,
            y.problem ? y.problem : "bad YAML");
        yaml_parser_delete(&y);
        return -1;
    }
    p->doc = &doc;
    root = yaml_document_get_root_node(&doc);
    if (root != NULL && root->type == YAML_MAPPING_NODE) {
        for (pair = root->data.mapping.pairs.start;
            pair < root->data.mapping.pairs.top; pair++) {
            yaml_node_t *kn = sr_node(p, pair->key);

            if (kn->type == YAML_SCALAR_NODE &&
                strcmp((const char *)kn->data.scalar.value, "shaping") == 0)
                sec = sr_node(p, pair->value);
        }
    }
    if (sec == NULL && !main)
        sec = root;                     /* a rules file's own top */
    if (sec == NULL)
        rc = 1;
    else if (root != NULL)
        sr_each(p, sec, "shaping", sr_top_pair, main ? p : NULL);
    yaml_document_delete(&doc);
    yaml_parser_delete(&y);
    p->doc = NULL;
    return p->nerr > 0 ? -1 : rc;
}

static char *
sr_read(const char *path, size_t *len, char *err, size_t errsz)
{
    FILE  *f = fopen(path, "r");
    char  *buf = NULL;
    size_t cap = 0, n = 0, k;

    if (f == NULL) {
        snprintf(err, errsz, "%s: %s", path, strerror(errno));
        return NULL;
    }
    do {
        if (n + 4096 > cap) {
            cap = cap ? cap * 2 : 8192;
            buf = xrealloc(buf, cap);
        }
        k = fread(buf + n, 1, cap - n - 1, f);
        n += k;
    } while (k > 0 && n < (16u << 20));
    fclose(f);
    buf[n] = '\0';
    *len = n;
    return buf;
}

static int
sr_load(const char *name, const char *text, size_t len, const char *dir,
    struct shape_rules **out, char *err, size_t errsz)
{
    struct sr_parse p;
    int             rc;

    memset(&p, 0, sizeof(p));
    p.file = name;
    p.err = err;
    p.errsz = errsz;
    err[0] = '\0';
    *out = NULL;
    p.r = xcalloc(1, sizeof(*p.r));
    rc = sr_doc(&p, text, len, 1);
    if (rc != 0) {
        shape_rules_free(p.r);
        return rc < 0 ? -1 : 0;
    }
    util_strlcpy(p.r->origin, name, sizeof(p.r->origin));
    if (p.rules_file[0] != '\0') {
        char    path[1100], *ftext;
        size_t  flen;
        struct sr_lim   top = p.r->defaults;
        struct sr_block *blocks = p.r->blocks;
        size_t           nblocks = p.r->nblocks;

        if (p.rules_file[0] != '/' && dir != NULL)
            snprintf(path, sizeof(path), "%s/%s", dir, p.rules_file);
        else
            util_strlcpy(path, p.rules_file, sizeof(path));
        if ((ftext = sr_read(path, &flen, err, errsz)) == NULL) {
            char why[300];

            util_strlcpy(why, err, sizeof(why));
            snprintf(err, errsz, "%s:%zu:%zu: shaping.rules_file: %s", name,
                p.rules_mark.line + 1, p.rules_mark.column + 1, why);
            shape_rules_free(p.r);
            return -1;
        }
        /* the file's sites first: they come before relay.yaml's */
        p.r->blocks = NULL;
        p.r->nblocks = 0;
        memset(&p.r->defaults, 0, sizeof(p.r->defaults));
        p.file = path;
        rc = sr_doc(&p, ftext, flen, 0);
        free(ftext);
        p.r->blocks = xrealloc(p.r->blocks, (p.r->nblocks + nblocks + 1) *
            sizeof(*blocks));
        if (nblocks > 0)
            memcpy(p.r->blocks + p.r->nblocks, blocks,
                nblocks * sizeof(*blocks));
        p.r->nblocks += nblocks;
        free(blocks);
        sr_lim_merge(&top, &p.r->defaults);
        p.r->defaults = top;
        if (rc < 0) {
            shape_rules_free(p.r);
            return -1;
        }
        snprintf(p.r->origin + strlen(p.r->origin),
            sizeof(p.r->origin) - strlen(p.r->origin), ", %s", path);
    }
    *out = p.r;
    return 0;
}

int
shape_rules_parse(const char *name, const char *text, size_t len,
    struct shape_rules **out, char *err, size_t errsz)
{
    return sr_load(name, text, len, NULL, out, err, errsz);
}

int
shape_rules_load(const char *config_path, struct shape_rules **out,
    char *err, size_t errsz)
{
    size_t len;
    char  *text = sr_read(config_path, &len, err, errsz), dir[1024];
    char  *slash;
    int    rc;

    *out = NULL;
    if (text == NULL)
        return -1;
    util_strlcpy(dir, config_path, sizeof(dir));
    slash = strrchr(dir, '/');
    if (slash != NULL)
        *slash = '\0';
    else
        util_strlcpy(dir, ".", sizeof(dir));
    rc = sr_load(config_path, text, len, dir, out, err, errsz);
    free(text);
    return rc;
}

void
shape_rules_free(struct shape_rules *r)
{
    size_t i, j;

    if (r == NULL)
        return;
    for (i = 0; i < r->nblocks; i++) {
        struct sr_block *b = &r->blocks[i];

        for (j = 0; j < b->nmx; j++)
            free(b->mx[j]);
        for (j = 0; j < b->ndom; j++)
            free(b->dom[j]);
        sr_bo_free(b->bo, b->nbo);
    }
    free(r->blocks);
    sr_bo_free(r->bo, r->nbo);
    free(r);
}

const char *
shape_rules_origin(const struct shape_rules *r)
{
    return r != NULL ? r->origin : "";
}
