/*
 * shape_site.c - sites, the limits in force and the back-off rule that
 * matches a reply (shape.h; the rules are read in shape_rules.c).
 *
 * PURPOSE   shape_site(): the most specific block whose mx: or domains:
 *           match names the site and gives the limits (see PRECEDENCE in
 *           shape_rules.c); an unmatched destination is named after its
 *           lowest-preference MX host's parent domain (mx1.example.net ->
 *           example.net; gmail.com and googlemail.com share
 *           gmail-smtp-in.l.google.com -> l.google.com), so domains with
 *           the same MX hosts share a site without a rule.
 * BACKOFF   A rule matches when every field it gives matches: code
 *           ("421", "4xx"), enhanced (a glob: "4.7.*"), text (an extended
 *           regular expression, case-insensitive), class (bclass's name)
 *           and kind.  The block's rules first, then the global ones; when
 *           the rules list none at all, the built-in defaults (DEFAULTS).
 */
#include <ctype.h>
#include <regex.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/util.h"
#include "shape/shape.h"
#include "shape/shape_int.h"

/* DEFAULTS: what the big receivers say when they want less (see
 * packaging/shaping.yaml.example and relay.yaml(5)). */
static const struct {
    const char    *enhanced, *text;
    enum shape_act act;
    uint64_t       for_ms;
    uint32_t       factor, steps;
    uint64_t       step_ms;
} sr_defaults[] = {
    /* Gmail: "421 4.7.28 ... unusual rate of unsolicited mail" */
    { "4.7.28", NULL, SHAPE_ACT_SLOW, 10 * 60000, 500, 4, 5 * 60000 },
    /* anyone: "421 too many connections", "too many concurrent ..." */
    { NULL, "too many (connections|concurrent|sessions)", SHAPE_ACT_SLOW,
      5 * 60000, 500, 3, 5 * 60000 },
    /* Yahoo: "421 4.7.0 [TSS04] Messages ... temporarily deferred" */
    { NULL, "\\[?TSS?0[1-9]\\]?", SHAPE_ACT_SUSPEND, 15 * 60000, 0, 0, 0 },
    /* Outlook: "451 4.7.650 ... temporarily rate limited" */
    { NULL, "(temporarily|been) rate limited|4\\.7\\.650", SHAPE_ACT_SLOW,
      10 * 60000, 500, 4, 5 * 60000 },
};
#define SR_NDEFAULTS (sizeof(sr_defaults) / sizeof(sr_defaults[0]))

static int
sr_is_literal(const char *s)
{
    return s[0] == '[' || strchr(s, ':') != NULL ||
        strspn(s, "0123456789.") == strlen(s);
}

/* sr_score - how specifically block b matches: 0 not at all. */
static unsigned
sr_score(const struct sr_block *b, const char *domain,
    const char *const *mx, size_t nmx)
{
    unsigned best = 0, s;
    size_t   i, j, n;

    for (i = 0; domain != NULL && i < b->ndom; i++)
        if (strcasecmp(b->dom[i], domain) == 0)
            return 40000;
    for (i = 0; i < b->nmx; i++) {
        const char *p = b->mx[i];
        size_t      pl = strlen(p);

        for (j = 0; j < nmx; j++) {
            n = strlen(mx[j]);
            s = 0;
            if (strpbrk(p, "*?") != NULL) {
                if (shape_glob(p, mx[j]))
                    s = 10000 + (unsigned)(pl - strspn(p, "*?"));
            } else if (p[0] == '.') {
                if ((n > pl && strcasecmp(mx[j] + n - pl, p) == 0) ||
                    strcasecmp(mx[j], p + 1) == 0)
                    s = 20000 + (unsigned)pl;
            } else if (strcasecmp(mx[j], p) == 0) {
                s = 30000 + (unsigned)pl;
            }
            if (s > best)
                best = s;
        }
    }
    return best;
}

/* sr_canon - the name of a site no block names. */
static void
sr_canon(const char *domain, const char *const *mx, size_t nmx, char *site)
{
    const char *h = nmx > 0 ? mx[0] : NULL, *dot;
    size_t      i;

    if (h == NULL || h[0] == '\0' || sr_is_literal(h)) {
        h = domain != NULL && domain[0] != '\0' ? domain :
            (h != NULL && h[0] != '\0' ? h : "-");
    } else {
        dot = strchr(h, '.');
        /* the parent, when it has two labels at least */
        if (dot != NULL && strchr(dot + 1, '.') != NULL)
            h = dot + 1;
    }
    util_strlcpy(site, h, SHAPE_NAME_MAX);
    for (i = 0; site[i] != '\0'; i++) {
        site[i] = (char)tolower((unsigned char)site[i]);
        if (site[i] == ' ' || site[i] == '"' || site[i] == '\\')
            site[i] = '_';
    }
    if (i > 0 && site[i - 1] == '.')
        site[i - 1] = '\0';
}

int
shape_site(const struct shape_rules *r, const char *domain,
    const char *const *mx, size_t nmx, char *site)
{
    unsigned best = 0, s;
    size_t   i;
    int      blk = -1;

    for (i = 0; r != NULL && i < r->nblocks; i++) {
        s = sr_score(&r->blocks[i], domain, mx, nmx);
        if (s > best) {
            best = s;
            blk = (int)i;
        }
    }
    if (blk >= 0 && r->blocks[blk].name[0] != '\0')
        util_strlcpy(site, r->blocks[blk].name, SHAPE_NAME_MAX);
    else
        sr_canon(domain, mx, nmx, site);
    return blk;
}

void
shape_limits_of(const struct shape_rules *r, int block, const char *source,
    struct shape_limits *out)
{
    const struct sr_block *b;
    size_t                 i;

    memset(out, 0, sizeof(*out));
    if (r == NULL)
        return;
    *out = r->defaults.l;
    if (block < 0 || (size_t)block >= r->nblocks)
        return;
    b = &r->blocks[block];
    sr_lim_over_pub(out, &b->lim);
    for (i = 0; source != NULL && i < b->nsrc; i++)
        if (strcmp(b->src[i].name, source) == 0)
            sr_lim_over_pub(out, &b->src[i].lim);
}

const char *
shape_site_of_domain(const struct shape_rules *r, const char *domain)
{
    size_t i, j;

    for (i = 0; r != NULL && i < r->nblocks; i++)
        for (j = 0; j < r->blocks[i].ndom; j++)
            if (r->blocks[i].name[0] != '\0' &&
                strcasecmp(r->blocks[i].dom[j], domain) == 0)
                return r->blocks[i].name;
    return NULL;
}

/* ---- back-off ---- */

/* The parts of a reply "421 4.7.28 text": code (0 when none), the
 * enhanced code ("" when none). */
static int
sr_reply_parts(const char *reply, char *enh, size_t enhsz)
{
    int    code = 0;
    size_t n;

    enh[0] = '\0';
    if (reply == NULL)
        return 0;
    if (isdigit((unsigned char)reply[0]) && isdigit((unsigned char)reply[1])
        && isdigit((unsigned char)reply[2]) &&
        (reply[3] == ' ' || reply[3] == '-' || reply[3] == '\0')) {
        code = (reply[0] - '0') * 100 + (reply[1] - '0') * 10 +
            (reply[2] - '0');
        reply += reply[3] != '\0' ? 4 : 3;
    }
    /* an enhanced code anywhere near the front: "... 4.4.1 ..." */
    for (; *reply != '\0'; reply++) {
        if ((reply[0] == '2' || reply[0] == '4' || reply[0] == '5') &&
            reply[1] == '.' && isdigit((unsigned char)reply[2])) {
            n = strspn(reply, "0123456789.");
            if (n < enhsz && memchr(reply + 2, '.', n - 2) != NULL) {
                memcpy(enh, reply, n);
                enh[n] = '\0';
                if (n > 0 && enh[n - 1] == '.')
                    enh[n - 1] = '\0';
                break;
            }
        }
    }
    return code;
}

static int
sr_bo_matches(const struct sr_backoff *b, int code, const char *enh,
    const char *reply, enum shape_kind kind, const char *cls)
{
    int div = b->code_digits == 1 ? 100 : b->code_digits == 2 ? 10 : 1;

    if (b->code_digits > 0 && (code == 0 || code / div != b->code))
        return 0;
    if (b->enhanced[0] != '\0' && (enh[0] == '\0' ||
        !shape_glob(b->enhanced, enh)))
        return 0;
    if (b->cls[0] != '\0' && (cls == NULL || strcmp(b->cls, cls) != 0))
        return 0;
    if (b->kind >= 0 && (enum shape_kind)b->kind != kind)
        return 0;
    if (b->has_re && regexec(&b->re, reply, 0, NULL, 0) != 0)
        return 0;
    return 1;
}

/* The built-in rules, compiled once per process (a worker's first
 * failure). */
static struct sr_backoff *
sr_default_rules(void)
{
    static struct sr_backoff d[SR_NDEFAULTS];
    static int               ready;
    size_t                   i;

    if (ready)
        return d;
    for (i = 0; i < SR_NDEFAULTS; i++) {
        memset(&d[i], 0, sizeof(d[i]));
        d[i].kind = -1;
        if (sr_defaults[i].enhanced != NULL)
            util_strlcpy(d[i].enhanced, sr_defaults[i].enhanced,
                sizeof(d[i].enhanced));
        if (sr_defaults[i].text != NULL)
            d[i].has_re = regcomp(&d[i].re, sr_defaults[i].text,
                REG_EXTENDED | REG_ICASE | REG_NOSUB) == 0;
        d[i].a.act = sr_defaults[i].act;
        d[i].a.rule = (int)i;
        d[i].a.for_ms = sr_defaults[i].for_ms;
        d[i].a.factor = sr_defaults[i].factor;
        d[i].a.steps = sr_defaults[i].steps;
        d[i].a.step_ms = sr_defaults[i].step_ms;
        d[i].a.base.n = 60;
        d[i].a.base.per_ms = 60000;
    }
    ready = 1;
    return d;
}

static int
sr_bo_first(const struct sr_backoff *bo, size_t n, int code, const char *enh,
    const char *reply, enum shape_kind kind, const char *cls,
    struct shape_action *out)
{
    size_t i;

    for (i = 0; i < n; i++) {
        if (sr_bo_matches(&bo[i], code, enh, reply, kind, cls)) {
            *out = bo[i].a;
            return 1;
        }
    }
    return 0;
}

void
shape_backoff_match(const struct shape_rules *r, int block,
    const char *reply, enum shape_kind kind, const char *cls,
    struct shape_action *out)
{
    char   enh[32];
    int    code = sr_reply_parts(reply, enh, sizeof(enh));
    size_t i, any = r != NULL ? r->nbo : 0;

    memset(out, 0, sizeof(*out));
    if (r == NULL || reply == NULL)
        return;
    if (block >= 0 && (size_t)block < r->nblocks &&
        sr_bo_first(r->blocks[block].bo, r->blocks[block].nbo, code, enh,
        reply, kind, cls, out))
        return;
    if (sr_bo_first(r->bo, r->nbo, code, enh, reply, kind, cls, out))
        return;
    for (i = 0; i < r->nblocks; i++)
        any += r->blocks[i].nbo;
    if (any == 0)
        (void)sr_bo_first(sr_default_rules(), SR_NDEFAULTS, code, enh, reply,
            kind, cls, out);
}
