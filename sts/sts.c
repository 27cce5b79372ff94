/*
 * sts.c - MTA-STS text parsers (RFC 8461 3.1, 3.2, 4.1); see sts.h.
 *
 * Both inputs come from the network (DNS TXT, an HTTPS body), so every
 * byte is checked against the RFC's ABNF and every piece of input quoted
 * in a reason is escaped first.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "sts/sts.h"

#define STS_WSP(c) ((c) == ' ' || (c) == '\t')
#define STS_ALNUM(c) (((c) >= 'a' && (c) <= 'z') || \
    ((c) >= 'A' && (c) <= 'Z') || ((c) >= '0' && (c) <= '9'))


/* sts_quote - at most 40 bytes of s, printable ASCII kept, others \xHH. */
static void
sts_quote(const char *s, size_t n, char *out, size_t outsz)
{
    size_t o = 0, i;

    if (outsz == 0)
        return;
    for (i = 0; i < n && i < 40 && o + 5 < outsz; i++) {
        unsigned char c = (unsigned char)s[i];

        if (c >= 0x20 && c < 0x7f && c != '\\')
            out[o++] = (char)c;
        else
            o += (size_t)snprintf(out + o, outsz - o, "\\x%02x", c);
    }
    if (i < n && o + 4 < outsz) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o] = '\0';
}


static int
sts_fail(char *why, size_t whysz, const char *what, const char *s, size_t n)
{
    char q[200];

    sts_quote(s, n, q, sizeof(q));
    if (why != NULL && whysz > 0)
        snprintf(why, whysz, "%s: \"%s\"", what, q);
    return STS_EINVAL;
}


/* sts_ext_name - (ALPHA / DIGIT) *31(ALPHA / DIGIT / "_" / "-" / "."). */
static int
sts_ext_name(const char *s, size_t n)
{
    size_t i;

    if (n == 0 || n > 32 || !STS_ALNUM(s[0]))
        return 0;
    for (i = 1; i < n; i++)
        if (!STS_ALNUM(s[i]) && s[i] != '_' && s[i] != '-' && s[i] != '.')
            return 0;
    return 1;
}


/* ---- the TXT record (RFC 8461 3.1) ---- */

/* sts_txt_field - one "name=value" of the record into id when it is id. */
static int
sts_txt_field(const char *f, size_t n, char *id, int *have_id, char *why,
    size_t whysz)
{
    const char *eq = memchr(f, '=', n);
    size_t      kn, vn, i;

    if (eq == NULL)
        return sts_fail(why, whysz, "TXT field without '='", f, n);
    kn = (size_t)(eq - f);
    vn = n - kn - 1;
    if (!sts_ext_name(f, kn))
        return sts_fail(why, whysz, "bad TXT field name", f, n);
    if (vn == 0)
        return sts_fail(why, whysz, "empty TXT field value", f, n);
    if (kn == 2 && memcmp(f, "id", 2) == 0) {
        if (vn >= STS_ID_MAX)
            return sts_fail(why, whysz, "id longer than 32", f, n);
        for (i = 0; i < vn; i++)
            if (!STS_ALNUM(eq[1 + i]))
                return sts_fail(why, whysz, "id not alphanumeric", f, n);
        if (!*have_id) {            /* the first id counts */
            memcpy(id, eq + 1, vn);
            id[vn] = '\0';
            *have_id = 1;
        }
        return 0;
    }
    /* sts-ext-value = 1*(%x21-3A / %x3C / %x3E-7E) */
    for (i = 0; i < vn; i++) {
        unsigned char c = (unsigned char)eq[1 + i];

        if (c < 0x21 || c > 0x7e || c == ';' || c == '=')
            return sts_fail(why, whysz, "bad TXT field value", f, n);
    }
    return 0;
}


int
sts_txt_parse(const char *txt, size_t len, char *id, char *why,
    size_t whysz)
{
    static const char ver[] = "v=STSv1";
    size_t            vl = sizeof(ver) - 1, i, start;
    int               have_id = 0, rc;

    if (why != NULL && whysz > 0)
        why[0] = '\0';
    /* "records that do not begin with v=STSv1; are discarded" */
    if (len < vl || memcmp(txt, ver, vl) != 0 ||
        (len > vl && txt[vl] != ';' && !STS_WSP(txt[vl]))) {
        if (why != NULL && whysz > 0)
            snprintf(why, whysz, "not an MTA-STS record");
        return STS_ENOTSTS;
    }
    i = vl;
    for (;;) {
        while (i < len && STS_WSP(txt[i]))
            i++;
        if (i == len)
            break;
        if (txt[i] != ';')
            return sts_fail(why, whysz, "expected ';'", txt + i, len - i);
        i++;
        while (i < len && STS_WSP(txt[i]))
            i++;
        if (i == len)                  /* a final delimiter is allowed */
            break;
        start = i;
        while (i < len && txt[i] != ';' && !STS_WSP(txt[i]))
            i++;
        rc = sts_txt_field(txt + start, i - start, id, &have_id, why,
            whysz);
        if (rc != 0)
            return rc;
    }
    if (!have_id)
        return sts_fail(why, whysz, "no id in the TXT record", txt, len);
    return 0;
}


/* ---- the policy file (RFC 8461 3.2) ---- */

/* sts_domain - an LDH host name (RFC 5321 Domain), lower-cased into out
 * without a final dot; 0 or -1. */
static int
sts_domain(const char *s, size_t n, char *out, size_t outsz)
{
    size_t i, label = 0;

    if (n > 0 && s[n - 1] == '.')
        n--;
    if (n == 0 || n >= outsz || n > 253)
        return -1;
    for (i = 0; i < n; i++) {
        char c = s[i];

        if (c == '.') {
            if (label == 0 || s[i - 1] == '-')
                return -1;
            label = 0;
        } else if (STS_ALNUM(c) || c == '-') {
            if ((c == '-' && label == 0) || ++label > 63)
                return -1;
        } else {
            return -1;
        }
        out[i] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
    }
    if (s[n - 1] == '-')
        return -1;
    out[n] = '\0';
    return 0;
}


/* sts_mx_value - ["*."] Domain into the next slot of p. */
static int
sts_mx_value(struct sts_policy *p, const char *v, size_t n, char *why,
    size_t whysz)
{
    char   spare[STS_NAME_MAX];
    char  *slot;
    size_t off = 0;

    /* Past STS_MX_MAX a pattern is checked and counted, not kept: the
     * first ones still restrict.  Refusing the whole policy would deliver
     * as if the domain had none (no TLS required at all); keeping the
     * first ones can only refuse an MX that a dropped pattern allowed,
     * which defers that mail instead of sending it in the clear. */
    slot = p->nmx < STS_MX_MAX ? p->mx[p->nmx] : spare;
    if (n >= 2 && v[0] == '*' && v[1] == '.') {
        slot[0] = '*';
        slot[1] = '.';
        off = 2;
    }
    if (sts_domain(v + off, n - off, slot + off, STS_NAME_MAX - off) < 0)
        return sts_fail(why, whysz, "bad mx pattern", v, n);
    if (slot == spare)
        p->mx_ignored++;
    else
        p->nmx++;
    return 0;
}


/* sts_max_age - 1*10(DIGIT), clamped to one year. */
static int
sts_max_age(struct sts_policy *p, const char *v, size_t n, char *why,
    size_t whysz)
{
    uint64_t x = 0;
    size_t   i;

    if (n == 0 || n > 10)
        return sts_fail(why, whysz, "bad max_age", v, n);
    for (i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return sts_fail(why, whysz, "bad max_age", v, n);
        x = x * 10 + (uint64_t)(v[i] - '0');
    }
    p->max_age = x > STS_MAX_AGE_MAX ? STS_MAX_AGE_MAX : (uint32_t)x;
    return 0;
}


enum { F_VERSION = 1, F_MODE = 2, F_MAXAGE = 4 };

/* sts_policy_line - one "key: value" line (without its line end). */
static int
sts_policy_line(struct sts_policy *p, unsigned *seen, const char *l,
    size_t n, char *why, size_t whysz)
{
    const char *colon = memchr(l, ':', n), *v;
    size_t      kn, vn, i;

    if (colon == NULL)
        return sts_fail(why, whysz, "policy line without ':'", l, n);
    kn = (size_t)(colon - l);
    if (!sts_ext_name(l, kn))
        return sts_fail(why, whysz, "bad policy field name", l, n);
    v = colon + 1;
    vn = n - kn - 1;
    while (vn > 0 && STS_WSP(*v)) {
        v++;
        vn--;
    }
    while (vn > 0 && STS_WSP(v[vn - 1]))
        vn--;
    for (i = 0; i < vn; i++)
        if ((unsigned char)v[i] < 0x20 || (unsigned char)v[i] > 0x7e)
            return sts_fail(why, whysz, "control byte in policy", l, n);
    if (kn == 7 && memcmp(l, "version", 7) == 0) {
        if (*seen & F_VERSION)
            return 0;
        *seen |= F_VERSION;
        if (vn != 5 || memcmp(v, "STSv1", 5) != 0)
            return sts_fail(why, whysz, "version is not STSv1", v, vn);
    } else if (kn == 4 && memcmp(l, "mode", 4) == 0) {
        if (*seen & F_MODE)
            return 0;
        *seen |= F_MODE;
        if (vn == 7 && memcmp(v, "enforce", 7) == 0)
            p->mode = STS_MODE_ENFORCE;
        else if (vn == 7 && memcmp(v, "testing", 7) == 0)
            p->mode = STS_MODE_TESTING;
        else if (vn == 4 && memcmp(v, "none", 4) == 0)
            p->mode = STS_MODE_NONE;
        else
            return sts_fail(why, whysz, "bad mode", v, vn);
    } else if (kn == 7 && memcmp(l, "max_age", 7) == 0) {
        if (*seen & F_MAXAGE)
            return 0;
        *seen |= F_MAXAGE;
        return sts_max_age(p, v, vn, why, whysz);
    } else if (kn == 2 && memcmp(l, "mx", 2) == 0) {
        return sts_mx_value(p, v, vn, why, whysz);
    } else if (vn == 0) {
        return sts_fail(why, whysz, "empty policy field", l, n);
    }
    return 0;                       /* an extension: ignored */
}


int
sts_policy_parse(const char *text, size_t len, struct sts_policy *p,
    char *why, size_t whysz)
{
    unsigned seen = 0;
    size_t   i = 0;
    int      rc;

    memset(p, 0, sizeof(*p));
    if (why != NULL && whysz > 0)
        why[0] = '\0';
    if (len > STS_POLICY_MAX)
        return sts_fail(why, whysz, "policy larger than 64 KiB", text, 0);
    if (memchr(text, '\0', len) != NULL)
        return sts_fail(why, whysz, "NUL byte in policy", text, 0);
    while (i < len) {
        const char *nl = memchr(text + i, '\n', len - i);
        size_t      end = nl != NULL ? (size_t)(nl - text) : len, n;

        n = end - i;
        if (n > 0 && text[i + n - 1] == '\r')
            n--;
        /* blank lines (a final empty line, trailing space) are allowed */
        {
            size_t k = 0;

            while (k < n && STS_WSP(text[i + k]))
                k++;
            if (k < n && (rc = sts_policy_line(p, &seen, text + i, n, why,
                whysz)) != 0)
                return rc;
        }
        i = end + 1;
    }
    if (!(seen & F_VERSION))
        return sts_fail(why, whysz, "policy without version", text, 0);
    if (!(seen & F_MODE))
        return sts_fail(why, whysz, "policy without mode", text, 0);
    if (!(seen & F_MAXAGE))
        return sts_fail(why, whysz, "policy without max_age", text, 0);
    if (p->mode != STS_MODE_NONE && p->nmx == 0)
        return sts_fail(why, whysz, "policy without mx", text, 0);
    return 0;
}


/* ---- MX patterns (RFC 8461 4.1) ---- */

int
sts_pattern_match(const char *pattern, const char *host)
{
    char        h[STS_NAME_MAX];
    const char *dot;
    size_t      pl = strlen(pattern);

    if (sts_domain(host, strlen(host), h, sizeof(h)) < 0 || pl == 0)
        return 0;
    if (pattern[pl - 1] == '.')
        pl--;
    if (pl >= 2 && pattern[0] == '*' && pattern[1] == '.') {
        /* "*" is exactly one label: strip h's first label and compare */
        if ((dot = strchr(h, '.')) == NULL || dot == h)
            return 0;
        return strlen(dot + 1) == pl - 2 &&
            strncasecmp(dot + 1, pattern + 2, pl - 2) == 0;
    }
    return strlen(h) == pl && strncasecmp(h, pattern, pl) == 0;
}


int
sts_mx_match(const struct sts_policy *p, const char *host)
{
    size_t i;

    for (i = 0; i < p->nmx; i++)
        if (sts_pattern_match(p->mx[i], host))
            return 1;
    return 0;
}


const char *
sts_mode_name(enum sts_mode m)
{
    switch (m) {
    case STS_MODE_ENFORCE:
        return "enforce";
    case STS_MODE_TESTING:
        return "testing";
    case STS_MODE_NONE:
    default:
        return "none";
    }
}
