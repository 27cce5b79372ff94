/*
 * parse.c - pure parsers for SMTP command lines (see smtp.h).
 *
 * PURPOSE   Turn one command line (without CRLF) into a verb and, for MAIL,
 *           RCPT, BDAT and EHLO/HELO, checked values: RFC 5321 paths,
 *           RFC 1870 SIZE, RFC 6152 BODY, RFC 6531 SMTPUTF8, RFC 3461 DSN
 *           parameters, RFC 8689 REQUIRETLS (syntax only: whether the
 *           session is TLS is the server's check), RFC 3030 BDAT.
 * CONTRACT  No I/O, no allocation, no logging.  Nothing is read outside
 *           [p, p+n); input need not be NUL-terminated.  Addresses are
 *           copied as written (quotes kept, case kept); a source route is
 *           dropped.
 * FAILURE   -1 with *reply set to a complete reply without CRLF.  Replies
 *           are string constants, except "555 5.5.4 Unsupported option: X",
 *           which lives in a static buffer valid until the next call.
 *           Address errors say 5.1.7 for MAIL (allow_null set) and 5.1.3
 *           for RCPT; a non-ASCII address without SMTPUTF8 gets 553 5.6.7.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "smtp/smtp.h"

#define SMTP_LOCAL_MAX   64
#define SMTP_DOMAIN_MAX  255
#define SMTP_LABEL_MAX   63
#define SMTP_KEYWORD_MAX 64

/* Address replies: [0] for MAIL (sender), [1] for RCPT (recipient). */
static const char *const smtp_r_syntax[2] = {
    "501 5.1.7 Bad sender address syntax",
    "501 5.1.3 Bad recipient address syntax" };
static const char *const smtp_r_local[2] = {
    "501 5.1.7 Bad sender address syntax: local part too long",
    "501 5.1.3 Bad recipient address syntax: local part too long" };
static const char *const smtp_r_domain[2] = {
    "501 5.1.7 Bad sender address syntax: domain too long",
    "501 5.1.3 Bad recipient address syntax: domain too long" };
static const char *const smtp_r_long[2] = {
    "501 5.1.7 Bad sender address syntax: address too long",
    "501 5.1.3 Bad recipient address syntax: address too long" };
static const char *const smtp_r_literal[2] = {
    "501 5.1.7 Bad sender address syntax: bad address literal",
    "501 5.1.3 Bad recipient address syntax: bad address literal" };
static const char *const smtp_r_utf8[2] = {
    "553 5.6.7 Non-ASCII sender address requires SMTPUTF8",
    "553 5.6.7 Non-ASCII recipient address requires SMTPUTF8" };
static const char *const smtp_r_badutf8[2] = {
    "501 5.1.7 Bad sender address syntax: invalid UTF-8",
    "501 5.1.3 Bad recipient address syntax: invalid UTF-8" };
static const char *const smtp_r_null[2] = {
    "501 5.1.7 Bad sender address syntax",
    "501 5.1.3 Bad recipient address syntax: empty address" };

static const char smtp_r_mail_syntax[] = "501 5.5.4 Syntax: MAIL FROM:<address>";
static const char smtp_r_rcpt_syntax[] = "501 5.5.4 Syntax: RCPT TO:<address>";
static const char smtp_r_param[] = "501 5.5.4 Syntax error in parameters";
static const char smtp_r_size[] = "501 5.5.4 Bad message size syntax";
static const char smtp_r_body[] = "501 5.5.4 Bad BODY keyword value";
static const char smtp_r_smtputf8[] = "501 5.5.4 Bad SMTPUTF8 parameter syntax";
static const char smtp_r_ret[] = "501 5.5.4 Bad RET parameter syntax";
static const char smtp_r_envid[] = "501 5.5.4 Bad ENVID parameter syntax";
static const char smtp_r_auth[] = "501 5.5.4 Bad AUTH parameter syntax";
static const char smtp_r_requiretls[] =
    "501 5.5.4 Bad REQUIRETLS parameter syntax";
static const char smtp_r_notify[] = "501 5.5.4 Bad NOTIFY parameter syntax";
static const char smtp_r_orcpt[] = "501 5.5.4 Bad ORCPT parameter syntax";
static const char smtp_r_dup[] = "501 5.5.4 Duplicate parameter";
static const char smtp_r_bdat[] = "501 5.5.4 Syntax: BDAT count [LAST]";
static const char smtp_r_bdat_size[] = "501 5.5.4 Bad BDAT chunk size";
static const char smtp_r_helo_empty[] = "501 5.5.4 Syntax: EHLO hostname";
static const char smtp_r_helo_bad[] = "501 5.5.2 Invalid EHLO hostname";

static char smtp_r_unsupported[64 + SMTP_KEYWORD_MAX];

static const struct {
    const char     *name;
    size_t          len;
    enum smtp_verb  verb;
} smtp_verbs[] = {
    { "EHLO", 4, SMTP_EHLO }, { "HELO", 4, SMTP_HELO },
    { "MAIL", 4, SMTP_MAIL }, { "RCPT", 4, SMTP_RCPT },
    { "DATA", 4, SMTP_DATA }, { "BDAT", 4, SMTP_BDAT },
    { "RSET", 4, SMTP_RSET }, { "NOOP", 4, SMTP_NOOP },
    { "QUIT", 4, SMTP_QUIT }, { "VRFY", 4, SMTP_VRFY },
    { "HELP", 4, SMTP_HELP }, { "STARTTLS", 8, SMTP_STARTTLS },
    { "AUTH", 4, SMTP_AUTH },
};

enum smtp_verb
smtp_parse_verb(struct str line, struct str *arg)
{
    size_t i, len;

    for (i = 0; i < sizeof(smtp_verbs) / sizeof(smtp_verbs[0]); i++) {
        len = smtp_verbs[i].len;
        if (line.n < len || strncasecmp(line.p, smtp_verbs[i].name, len) != 0)
            continue;
        if (line.n == len) {
            arg->p = line.p + len;
            arg->n = 0;
            return smtp_verbs[i].verb;
        }
        if (line.p[len] == ' ') {
            arg->p = line.p + len + 1;
            arg->n = line.n - len - 1;
            return smtp_verbs[i].verb;
        }
    }
    arg->p = line.p + line.n;
    arg->n = 0;
    return SMTP_UNKNOWN;
}

/* --- character classes ------------------------------------------------ */

static int
smtp_is_alpha(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static int
smtp_is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

/* RFC 5322 atext. */
static int
smtp_is_atext(unsigned char c)
{
    return smtp_is_alpha(c) || smtp_is_digit(c) ||
        (c != 0 && strchr("!#$%&'*+-/=?^_`{|}~", c) != NULL);
}

/* RFC 5321 qtextSMTP: %d32-33 / %d35-91 / %d93-126. */
static int
smtp_is_qtext(unsigned char c)
{
    return c >= 32 && c <= 126 && c != '"' && c != '\\';
}

/*
 * Length of one well-formed UTF-8 sequence of 2..4 bytes at p (no overlong
 * forms, no surrogates, nothing above U+10FFFF), or 0.  C1 controls
 * (U+0080..U+009F) count as malformed: they are never part of a name, and
 * U+009B is a terminal's CSI.
 */
static size_t
smtp_utf8_len(const unsigned char *p, size_t n)
{
    unsigned char c = p[0], lo = 0x80, hi = 0xbf;
    size_t        len, i;

    if (c >= 0xc2 && c <= 0xdf)
        len = 2;
    else if (c >= 0xe0 && c <= 0xef)
        len = 3;
    else if (c >= 0xf0 && c <= 0xf4)
        len = 4;
    else
        return 0;
    if (n < len)
        return 0;
    if (c == 0xe0 || c == 0xc2)
        lo = 0xa0;
    else if (c == 0xed)
        hi = 0x9f;
    else if (c == 0xf0)
        lo = 0x90;
    else if (c == 0xf4)
        hi = 0x8f;
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (i = 2; i < len; i++)
        if (p[i] < 0x80 || p[i] > 0xbf)
            return 0;
    return len;
}

/*
 * A non-ASCII sequence at p inside an address: its length when utf8 allows
 * it and it is well formed; 0 with *why set otherwise.
 */
static size_t
smtp_addr_utf8(const unsigned char *p, size_t n, int utf8, int who,
    const char **why)
{
    size_t len;

    len = smtp_utf8_len(p, n);
    if (len == 0)
        *why = smtp_r_badutf8[who];
    else if (!utf8) {
        *why = smtp_r_utf8[who];
        len = 0;
    }
    return len;
}

/* --- domains and literals --------------------------------------------- */

/*
 * An address literal "[1.2.3.4]" or "[IPv6:...]" at p (p[0] == '[').
 * Returns its length including the brackets, or 0.
 */
static size_t
smtp_literal(const char *p, size_t n)
{
    char            tmp[64];
    unsigned char   addr[16];
    const char     *close, *start = p;
    size_t          len;
    int             af = AF_INET;

    close = memchr(p, ']', n);
    if (close == NULL)
        return 0;
    p++;
    len = (size_t)(close - p);
    if (len >= 5 && strncasecmp(p, "IPv6:", 5) == 0) {
        af = AF_INET6;
        p += 5;
        len -= 5;
    }
    if (len == 0 || len >= sizeof(tmp))
        return 0;
    memcpy(tmp, p, len);
    tmp[len] = '\0';
    if (inet_pton(af, tmp, addr) != 1)
        return 0;
    return (size_t)(close - start) + 1;
}

/*
 * Dot-separated labels at p: letters, digits, inner hyphens (and '_' when
 * lax, for HELO names), UTF-8 when utf8.  Stops at the first byte that
 * cannot continue a domain.  Returns the length, or 0 with *why set.
 * A trailing dot is accepted only when lax.
 */
static size_t
smtp_domain(const char *p, size_t n, int utf8, int lax, int who,
    const char **why)
{
    const unsigned char *u = (const unsigned char *)p;
    size_t  i = 0, label = 0, len;
    int     last = 0;                   /* the previous byte */

    *why = smtp_r_syntax[who];
    while (i < n) {
        if (u[i] == '.') {
            if (label == 0 || last == '-')
                return 0;
            label = 0;
            last = '.';
            i++;
            continue;
        }
        if (smtp_is_alpha(u[i]) || smtp_is_digit(u[i]) ||
            (lax && u[i] == '_')) {
            len = 1;
        } else if (u[i] == '-') {
            if (label == 0)
                return 0;
            len = 1;
        } else if (u[i] >= 0x80) {
            len = smtp_addr_utf8(u + i, n - i, utf8, who, why);
            if (len == 0)
                return 0;
        } else
            break;
        last = u[i];
        label += len;
        i += len;
        if (label > SMTP_LABEL_MAX)
            return 0;
    }
    if (i == 0 || last == '-' || (last == '.' && (!lax || i == 1)))
        return 0;
    if (i > SMTP_DOMAIN_MAX) {
        *why = smtp_r_domain[who];
        return 0;
    }
    return i;
}

/* --- paths ------------------------------------------------------------ */

/* Local part at p: dot-string or quoted-string; length or 0 (*why set). */
static size_t
smtp_local(const char *p, size_t n, int utf8, int who, const char **why)
{
    const unsigned char *u = (const unsigned char *)p;
    size_t  i = 0, len;
    int     dot = 1;                    /* at start or after a dot */

    *why = smtp_r_syntax[who];
    if (n > 0 && u[0] == '"') {
        for (i = 1; i < n && u[i] != '"'; i += len) {
            len = 1;
            if (u[i] == '\\') {
                if (i + 1 >= n || u[i + 1] < 32 || u[i + 1] > 126)
                    return 0;
                len = 2;
            } else if (u[i] >= 0x80) {
                len = smtp_addr_utf8(u + i, n - i, utf8, who, why);
                if (len == 0)
                    return 0;
            } else if (!smtp_is_qtext(u[i]))
                return 0;
        }
        if (i >= n)
            return 0;
        return i + 1;
    }
    while (i < n) {
        if (u[i] == '.') {
            if (dot)
                return 0;
            dot = 1;
            i++;
            continue;
        }
        if (smtp_is_atext(u[i]))
            len = 1;
        else if (u[i] >= 0x80) {
            len = smtp_addr_utf8(u + i, n - i, utf8, who, why);
            if (len == 0)
                return 0;
        } else
            break;
        dot = 0;
        i += len;
    }
    if (i == 0 || dot)
        return 0;
    return i;
}

/* A-d-l ":" — "@dom,@dom:"; returns its length (0 if absent), -1 bad. */
static long
smtp_route(const char *p, size_t n, int utf8, int who, const char **why)
{
    size_t i = 0, len;

    if (n == 0 || p[0] != '@')
        return 0;
    for (;;) {
        if (i >= n || p[i] != '@')
            return -1;
        i++;
        len = smtp_domain(p + i, n - i, utf8, 0, who, why);
        if (len == 0 && i < n && p[i] == '[')
            len = smtp_literal(p + i, n - i);
        if (len == 0)
            return -1;
        i += len;
        if (i < n && p[i] == ':')
            return (long)(i + 1);
        if (i >= n || p[i] != ',')
            return -1;
        i++;
    }
}

int
smtp_parse_path(const char *p, size_t n, int allow_null, int utf8,
    char *out, size_t outsz, size_t *end, const char **reply)
{
    int         who = allow_null ? 0 : 1;
    const char *why = smtp_r_syntax[who];
    size_t      i = 1, at, local, domain, total;
    long        route;

    if (n < 2 || p[0] != '<')
        goto bad;
    if (p[1] == '>') {
        if (!allow_null) {
            why = smtp_r_null[who];
            goto bad;
        }
        if (outsz < 1)
            goto bad;
        out[0] = '\0';
        *end = 2;
        return 0;
    }
    route = smtp_route(p + 1, n - 1, utf8, who, &why);
    if (route < 0)
        goto bad;
    i += (size_t)route;
    at = i;
    local = smtp_local(p + i, n - i, utf8, who, &why);
    if (local == 0)
        goto bad;
    i += local;
    if (local > SMTP_LOCAL_MAX) {
        why = smtp_r_local[who];
        goto bad;
    }
    if (!allow_null && route == 0 && i < n && p[i] == '>' &&
        local == 10 && strncasecmp(p + at, "postmaster", 10) == 0) {
        domain = 0;                     /* RFC 5321 4.5.1 <Postmaster> */
    } else {
        if (i >= n || p[i] != '@')
            goto bad;
        i++;
        if (i < n && p[i] == '[') {
            domain = smtp_literal(p + i, n - i);
            if (domain == 0)
                why = smtp_r_literal[who];
        } else
            domain = smtp_domain(p + i, n - i, utf8, 0, who, &why);
        if (domain == 0)
            goto bad;
        i += domain;
    }
    if (i >= n || p[i] != '>') {
        why = smtp_r_syntax[who];
        goto bad;
    }
    total = i - at;
    if (total + 1 > outsz || total + 1 > SMTP_ADDR_MAX) {
        why = smtp_r_long[who];
        goto bad;
    }
    memcpy(out, p + at, total);
    out[total] = '\0';
    *end = i + 1;
    return 0;
bad:
    *reply = why;
    return -1;
}

/* --- parameters ------------------------------------------------------- */


/* One "KEYWORD[=value]" taken from an argument list. */
struct smtp_param {
    struct str  key;
    struct str  val;
    int         has_val;
};

/*
 * Next parameter from *rest (leading spaces skipped).  Returns 1 with *pm
 * filled, 0 at the end, -1 on bad syntax.
 */
static int
smtp_next_param(struct str *rest, struct smtp_param *pm)
{
    const char *p = rest->p, *e = rest->p + rest->n, *k;

    while (p < e && *p == ' ')
        p++;
    if (p == e) {
        rest->p = p;
        rest->n = 0;
        return 0;
    }
    k = p;
    while (p < e && (smtp_is_alpha((unsigned char)*p) ||
        smtp_is_digit((unsigned char)*p) || (*p == '-' && p > k)))
        p++;
    pm->key.p = k;
    pm->key.n = (size_t)(p - k);
    pm->has_val = 0;
    pm->val.p = p;
    pm->val.n = 0;
    if (p < e && *p == '=') {
        pm->has_val = 1;
        pm->val.p = ++p;
        /* esmtp-value: %d33-60 / %d62-126, UTF-8 (RFC 6531). */
        while (p < e && *p != ' ' && *p != '=' &&
            ((unsigned char)*p > 32 && (unsigned char)*p != 127))
            p++;
        pm->val.n = (size_t)(p - pm->val.p);
    }
    rest->p = p;
    rest->n = (size_t)(e - p);
    if (pm->key.n == 0 || (p < e && *p != ' '))
        return -1;
    return 1;
}

static int
smtp_key_is(const struct smtp_param *pm, const char *name)
{
    size_t n = strlen(name);

    return pm->key.n == n && strncasecmp(pm->key.p, name, n) == 0;
}

static int
smtp_val_is(struct str v, const char *name)
{
    size_t n = strlen(name);

    return v.n == n && strncasecmp(v.p, name, n) == 0;
}

static const char *
smtp_unsupported(const struct smtp_param *pm)
{
    size_t n = pm->key.n < SMTP_KEYWORD_MAX ? pm->key.n : SMTP_KEYWORD_MAX;

    snprintf(smtp_r_unsupported, sizeof(smtp_r_unsupported),
        "555 5.5.4 Unsupported option: %.*s", (int)n, pm->key.p);
    return smtp_r_unsupported;
}

/* Decimal digits into a uint64_t; -1 on empty, non-digit or overflow. */
static int
smtp_parse_u64(struct str v, uint64_t *out)
{
    uint64_t x = 0;
    size_t   i;
    unsigned d;

    if (v.n == 0)
        return -1;
    for (i = 0; i < v.n; i++) {
        if (!smtp_is_digit((unsigned char)v.p[i]))
            return -1;
        d = (unsigned)(v.p[i] - '0');
        if (x > (UINT64_MAX - d) / 10)
            return -1;
        x = x * 10 + d;
    }
    *out = x;
    return 0;
}

/* "FROM:" or "TO:" prefix, then one optional space; the path's offset. */
static int
smtp_prefix(struct str arg, const char *kw, size_t *off)
{
    size_t n = strlen(kw);

    if (arg.n < n || strncasecmp(arg.p, kw, n) != 0)
        return -1;
    if (arg.n > n && arg.p[n] == ' ')
        n++;
    *off = n;
    return 0;
}

static int
smtp_has_8bit(const char *s)
{
    for (; *s != '\0'; s++)
        if ((unsigned char)*s >= 0x80)
            return 1;
    return 0;
}

/* ENVID and ORCPT decode to printable US-ASCII (RFC 3461 4.2, 4.4; RFC
 * 6533 spells non-ASCII as \x{...}): the xtext decoder refuses controls,
 * this the 8-bit bytes it lets through, which a DSN or a terminal would
 * get raw (U+009B is a CSI). */
static int
smtp_xtext_ascii(int rc, const char *s)
{
    return rc < 0 || smtp_has_8bit(s) ? -1 : 0;
}

enum {
    SMTP_SEEN_SIZE = 1, SMTP_SEEN_BODY = 2, SMTP_SEEN_UTF8 = 4,
    SMTP_SEEN_RET = 8, SMTP_SEEN_ENVID = 16, SMTP_SEEN_NOTIFY = 32,
    SMTP_SEEN_ORCPT = 64, SMTP_SEEN_REQUIRETLS = 128, SMTP_SEEN_AUTH = 256
};

/* Marks bit in *seen; -1 when it was already there. */
static int
smtp_once(unsigned *seen, unsigned bit)
{
    if (*seen & bit)
        return -1;
    *seen |= bit;
    return 0;
}

/* One MAIL parameter into out; -1 with *reply. */
static int
smtp_mail_param(const struct smtp_param *pm, unsigned *seen,
    struct smtp_mail *out, const char **reply)
{
    unsigned bit;

    if (smtp_key_is(pm, "SIZE"))
        bit = SMTP_SEEN_SIZE;
    else if (smtp_key_is(pm, "BODY"))
        bit = SMTP_SEEN_BODY;
    else if (smtp_key_is(pm, "SMTPUTF8"))
        bit = SMTP_SEEN_UTF8;
    else if (smtp_key_is(pm, "RET"))
        bit = SMTP_SEEN_RET;
    else if (smtp_key_is(pm, "ENVID"))
        bit = SMTP_SEEN_ENVID;
    else if (smtp_key_is(pm, "REQUIRETLS"))
        bit = SMTP_SEEN_REQUIRETLS;
    else if (smtp_key_is(pm, "AUTH"))
        bit = SMTP_SEEN_AUTH;
    else {
        *reply = smtp_unsupported(pm);
        return -1;
    }
    if (smtp_once(seen, bit) < 0) {
        *reply = smtp_r_dup;
        return -1;
    }
    switch (bit) {
    case SMTP_SEEN_SIZE:
        if (!pm->has_val || smtp_parse_u64(pm->val, &out->size) < 0)
            goto bad_size;
        return 0;
    case SMTP_SEEN_BODY:
        if (pm->has_val && smtp_val_is(pm->val, "7BIT"))
            out->body = SMTP_BODY_7BIT;
        else if (pm->has_val && smtp_val_is(pm->val, "8BITMIME"))
            out->body = SMTP_BODY_8BITMIME;
        else if (pm->has_val && smtp_val_is(pm->val, "BINARYMIME"))
            out->body = SMTP_BODY_BINARYMIME;
        else
            goto bad_body;
        return 0;
    case SMTP_SEEN_UTF8:
        if (pm->has_val) {
            *reply = smtp_r_smtputf8;
            return -1;
        }
        out->smtputf8 = 1;
        return 0;
    case SMTP_SEEN_REQUIRETLS:          /* RFC 8689 2: no value */
        if (pm->has_val) {
            *reply = smtp_r_requiretls;
            return -1;
        }
        out->requiretls = 1;
        return 0;
    case SMTP_SEEN_AUTH: {
        /* RFC 4954 5: part of the AUTH extension, so accepted; its
         * mailbox (an xtext, or <>) is the client's word and is not
         * passed on: the message leaves as from <> there */
        char box[SMTP_ENVID_MAX];

        if (!pm->has_val || pm->val.n == 0 || (!smtp_val_is(pm->val, "<>") &&
            smtp_xtext_ascii(smtp_xtext_decode(pm->val.p, pm->val.n, box,
            sizeof(box)), box) < 0)) {
            *reply = smtp_r_auth;
            return -1;
        }
        return 0;
    }
    case SMTP_SEEN_RET:
        if (pm->has_val && smtp_val_is(pm->val, "FULL"))
            out->ret = SMTP_RET_FULL;
        else if (pm->has_val && smtp_val_is(pm->val, "HDRS"))
            out->ret = SMTP_RET_HDRS;
        else {
            *reply = smtp_r_ret;
            return -1;
        }
        return 0;
    default:
        if (!pm->has_val || pm->val.n == 0 ||
            smtp_xtext_ascii(smtp_xtext_decode(pm->val.p, pm->val.n,
            out->envid, sizeof(out->envid)), out->envid) < 0) {
            out->envid[0] = '\0';
            *reply = smtp_r_envid;
            return -1;
        }
        return 0;
    }
bad_size:
    *reply = smtp_r_size;
    return -1;
bad_body:
    *reply = smtp_r_body;
    return -1;
}

int
smtp_parse_mail(struct str arg, struct smtp_mail *out, const char **reply)
{
    struct smtp_param pm;
    struct str  rest;
    size_t      off, end;
    unsigned    seen = 0;
    int         rc;

    memset(out, 0, sizeof(*out));
    if (smtp_prefix(arg, "FROM:", &off) < 0) {
        *reply = smtp_r_mail_syntax;
        return -1;
    }
    /* SMTPUTF8 follows the path: accept UTF-8 now, check it at the end. */
    if (smtp_parse_path(arg.p + off, arg.n - off, 1, 1, out->addr,
        sizeof(out->addr), &end, reply) < 0)
        return -1;
    rest.p = arg.p + off + end;
    rest.n = arg.n - off - end;
    if (rest.n > 0 && rest.p[0] != ' ') {
        *reply = smtp_r_syntax[0];
        return -1;
    }
    while ((rc = smtp_next_param(&rest, &pm)) > 0)
        if (smtp_mail_param(&pm, &seen, out, reply) < 0)
            return -1;
    if (rc < 0) {
        *reply = smtp_r_param;
        return -1;
    }
    if (!out->smtputf8 && smtp_has_8bit(out->addr)) {
        *reply = smtp_r_utf8[0];
        return -1;
    }
    return 0;
}

/* NOTIFY=NEVER | SUCCESS,FAILURE,DELAY (any non-empty subset). */
static int
smtp_parse_notify(struct str v, unsigned *out)
{
    const char *p = v.p, *e = v.p + v.n, *c;
    struct str  item;
    unsigned    bits = 0;

    if (v.n == 0)
        return -1;
    while (p <= e) {
        c = memchr(p, ',', (size_t)(e - p));
        item.p = p;
        item.n = (size_t)((c != NULL ? c : e) - p);
        if (smtp_val_is(item, "NEVER"))
            bits |= SMTP_NOTIFY_NEVER;
        else if (smtp_val_is(item, "SUCCESS"))
            bits |= SMTP_NOTIFY_SUCCESS;
        else if (smtp_val_is(item, "FAILURE"))
            bits |= SMTP_NOTIFY_FAILURE;
        else if (smtp_val_is(item, "DELAY"))
            bits |= SMTP_NOTIFY_DELAY;
        else
            return -1;
        if (c == NULL)
            break;
        p = c + 1;
    }
    if ((bits & SMTP_NOTIFY_NEVER) && bits != SMTP_NOTIFY_NEVER)
        return -1;
    *out = bits;
    return 0;
}

/* ORCPT=addr-type;xtext into "addr-type;decoded". */
static int
smtp_parse_orcpt(struct str v, char *out, size_t outsz)
{
    const char *semi;
    size_t      t, i;

    semi = memchr(v.p, ';', v.n);
    if (semi == NULL || semi == v.p || v.n > SMTP_ORCPT_MAX - 1)
        return -1;
    t = (size_t)(semi - v.p);
    for (i = 0; i < t; i++)
        if (!smtp_is_atext((unsigned char)v.p[i]))
            return -1;
    if (t + 2 > outsz || semi + 1 == v.p + v.n)
        return -1;
    memcpy(out, v.p, t + 1);
    return smtp_xtext_ascii(smtp_xtext_decode(semi + 1, v.n - t - 1,
        out + t + 1, outsz - t - 1), out + t + 1);
}

static int
smtp_rcpt_param(const struct smtp_param *pm, unsigned *seen,
    struct smtp_rcpt *out, const char **reply)
{
    if (smtp_key_is(pm, "NOTIFY")) {
        if (smtp_once(seen, SMTP_SEEN_NOTIFY) < 0)
            goto dup;
        if (!pm->has_val || smtp_parse_notify(pm->val, &out->notify) < 0) {
            *reply = smtp_r_notify;
            return -1;
        }
        return 0;
    }
    if (smtp_key_is(pm, "ORCPT")) {
        if (smtp_once(seen, SMTP_SEEN_ORCPT) < 0)
            goto dup;
        if (!pm->has_val || smtp_parse_orcpt(pm->val, out->orcpt,
            sizeof(out->orcpt)) < 0) {
            out->orcpt[0] = '\0';
            *reply = smtp_r_orcpt;
            return -1;
        }
        return 0;
    }
    *reply = smtp_unsupported(pm);
    return -1;
dup:
    *reply = smtp_r_dup;
    return -1;
}

int
smtp_parse_rcpt(struct str arg, int smtputf8, struct smtp_rcpt *out,
    const char **reply)
{
    struct smtp_param pm;
    struct str  rest;
    size_t      off, end;
    unsigned    seen = 0;
    int         rc;

    memset(out, 0, sizeof(*out));
    if (smtp_prefix(arg, "TO:", &off) < 0) {
        *reply = smtp_r_rcpt_syntax;
        return -1;
    }
    if (smtp_parse_path(arg.p + off, arg.n - off, 0, smtputf8, out->addr,
        sizeof(out->addr), &end, reply) < 0)
        return -1;
    rest.p = arg.p + off + end;
    rest.n = arg.n - off - end;
    if (rest.n > 0 && rest.p[0] != ' ') {
        *reply = smtp_r_syntax[1];
        return -1;
    }
    while ((rc = smtp_next_param(&rest, &pm)) > 0)
        if (smtp_rcpt_param(&pm, &seen, out, reply) < 0)
            return -1;
    if (rc < 0) {
        *reply = smtp_r_param;
        return -1;
    }
    return 0;
}

int
smtp_parse_bdat(struct str arg, uint64_t *size, int *last,
    const char **reply)
{
    const char *p = arg.p, *e = arg.p + arg.n;
    struct str  num, word;

    num.p = p;
    while (p < e && smtp_is_digit((unsigned char)*p))
        p++;
    num.n = (size_t)(p - num.p);
    if (num.n == 0 || (p < e && *p != ' ')) {
        *reply = smtp_r_bdat;
        return -1;
    }
    while (p < e && *p == ' ')
        p++;
    word.p = p;
    while (p < e && *p != ' ')
        p++;
    word.n = (size_t)(p - word.p);
    while (p < e && *p == ' ')
        p++;
    if (p != e || (word.n > 0 && !smtp_val_is(word, "LAST"))) {
        *reply = smtp_r_bdat;
        return -1;
    }
    if (smtp_parse_u64(num, size) < 0) {
        *reply = smtp_r_bdat_size;
        return -1;
    }
    *last = word.n > 0;
    return 0;
}

int
smtp_parse_helo(struct str arg, const char **reply)
{
    const char *why;
    size_t      n = arg.n, len;

    while (n > 0 && arg.p[n - 1] == ' ')
        n--;
    if (n == 0) {
        *reply = smtp_r_helo_empty;
        return -1;
    }
    /* Lax: '_' and a trailing dot occur in real client names. */
    if (arg.p[0] == '[')
        len = smtp_literal(arg.p, n);
    else
        len = smtp_domain(arg.p, n, 1, 1, 0, &why);
    if (len != n) {
        *reply = smtp_r_helo_bad;
        return -1;
    }
    return 0;
}
