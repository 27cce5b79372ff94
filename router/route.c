/*
 * route.c - route values and route keys: parse, check, normalise.
 *
 * PURPOSE   The one place that says what a route value and a route key
 *           look like; config, router, delivery and mtactl all call it.
 * CONTRACT  Pure: no I/O, no allocation, no global state.  route_parse()
 *           fills a struct route whose strings live in the struct itself.
 *           Syntax (see route.h and docs in mtactl route help):
 *             smtp:HOST[:PORT][,smtp:HOST[:PORT]...]   at most 8 hosts
 *               HOST is a host name (its MX hosts are used, as in
 *               Postfix), an IPv4 address, or [anything] (no MX lookup):
 *               [mx.example.org], [10.0.0.1], [::1] or [IPv6:::1] (the
 *               RFC 5321 spelling); an IPv6 address must be bracketed.
 *               PORT defaults to 25.  Blanks around the commas are allowed.
 *             maildir:PATH   (absolute or relative)
 *             discard
 *             mx       the MX of each recipient's own domain
 *             reject:5yz 5.x.x [text]    y in 0-5; the text is ASCII
 *             defer:4yz 4.x.x [text]
 *             any smtp: or mx route may end in " pool=NAME": the egress
 *               pool its mail leaves through (route_pool_name_ok())
 *           The type words are case-insensitive.  No control characters,
 *           no leading or trailing blanks, at most ROUTE_VALUE_MAX bytes.
 * FAILURE   0, or -1 with a one-line reason in why (never logs).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "router/route.h"

#define ROUTE_LOCAL_MAX   64        /* RFC 5321 4.5.3.1.1 */
#define ROUTE_DOMAIN_MAX  253       /* textual form of a 255-octet name */
#define ROUTE_LABEL_MAX   63
#define ROUTE_REPLY_MAX   506       /* "550 " + text + CRLF <= 512 */

/* route_why - format the reason into why (when given); returns -1. */
static int route_why(char *why, size_t whysz, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int
route_why(char *why, size_t whysz, const char *fmt, ...)
{
    va_list ap;

    if (why != NULL && whysz > 0) {
        va_start(ap, fmt);
        vsnprintf(why, whysz, fmt, ap);
        va_end(ap);
    }
    return -1;
}


static int
route_isdigit(int c)
{
    return c >= '0' && c <= '9';
}


/* route_prefix - s starts with the word w (case-insensitive)? */
static int
route_prefix(const char *s, size_t n, const char *w)
{
    size_t wn = strlen(w);

    return n >= wn && strncasecmp(s, w, wn) == 0;
}


/*
 * route_hostname_ok - a DNS host name (letters, digits, '-', dots) or a
 * dotted IPv4 address.  A name whose last label is numeric is taken as an
 * attempted IPv4 address: no top-level domain is all digits.
 */
static int
route_hostname_ok(const char *h, size_t n, char *why, size_t whysz)
{
    struct in_addr a4;
    char    tmp[ROUTE_DOMAIN_MAX + 1];
    size_t  i, label = 0, last = 0;
    int     numeric = 1;

    if (n > ROUTE_DOMAIN_MAX)
        return route_why(why, whysz, "host name too long (%zu bytes, max %d)",
            n, ROUTE_DOMAIN_MAX);
    for (i = 0; i < n; i++)
        if (h[i] == '.')
            last = i + 1;
    for (i = last; i < n; i++)
        if (!route_isdigit((unsigned char)h[i]))
            numeric = 0;
    if (numeric) {
        memcpy(tmp, h, n);
        tmp[n] = '\0';
        if (inet_pton(AF_INET, tmp, &a4) != 1)
            return route_why(why, whysz, "bad IPv4 address '%.*s'", (int)n, h);
        return 0;
    }
    for (i = 0; i <= n; i++) {
        unsigned char c = i < n ? (unsigned char)h[i] : '.';

        if (c == '.') {
            if (label == 0)
                return route_why(why, whysz,
                    "bad host name '%.*s' (empty label)", (int)n, h);
            if (label > ROUTE_LABEL_MAX)
                return route_why(why, whysz,
                    "bad host name '%.*s' (label longer than %d)", (int)n, h,
                    ROUTE_LABEL_MAX);
            if (h[i - 1] == '-' || h[i - label] == '-')
                return route_why(why, whysz,
                    "bad host name '%.*s' (label starts or ends with '-')",
                    (int)n, h);
            label = 0;
            continue;
        }
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
            route_isdigit(c) || c == '-'))
            return route_why(why, whysz,
                "bad host name '%.*s' (character '%c')", (int)n, h, c);
        label++;
    }
    return 0;
}


/* route_port - decimal 1..65535; 0 or -1. */
static int
route_port(const char *s, size_t n, unsigned *port, char *why, size_t whysz)
{
    unsigned v = 0;
    size_t   i;

    if (n == 0 || n > 5)
        goto bad;
    for (i = 0; i < n; i++) {
        if (!route_isdigit((unsigned char)s[i]))
            goto bad;
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    if (v < 1 || v > 65535)
        goto bad;
    *port = v;
    return 0;
bad:
    return route_why(why, whysz, "bad port '%.*s' (expected 1-65535)",
        (int)n, s);
}


/*
 * route_host - one "HOST[:PORT]" (after "smtp:").  Bracketed hosts are
 * literal: an IPv4 address, an IPv6 address (with or without the RFC 5321
 * "IPv6:" tag, stored without it) or a host name used as is.
 */
static int
route_host(const char *s, size_t n, struct route_host *h, char *why,
    size_t whysz)
{
    struct in6_addr a6;
    const char *name, *rest, *colon;
    size_t  nn;
    char    tmp[INET6_ADDRSTRLEN + 8];

    h->port = 25;
    h->literal = 0;
    if (n == 0)
        return route_why(why, whysz, "empty host after 'smtp:'");
    if (s[0] == '[') {
        const char *close = memchr(s, ']', n);

        if (close == NULL)
            return route_why(why, whysz, "missing ']' in 'smtp:%.*s'",
                (int)n, s);
        name = s + 1;
        nn = (size_t)(close - name);
        rest = close + 1;
        h->literal = 1;
        if (nn >= 5 && strncasecmp(name, "IPv6:", 5) == 0) {
            name += 5;
            nn -= 5;
            if (nn == 0 || memchr(name, ':', nn) == NULL)
                return route_why(why, whysz, "bad IPv6 address '%.*s'",
                    (int)nn, name);
        }
        if (nn == 0)
            return route_why(why, whysz, "empty host in 'smtp:%.*s'",
                (int)n, s);
        if (memchr(name, ':', nn) != NULL) {
            if (nn >= sizeof(tmp))
                return route_why(why, whysz, "bad IPv6 address '%.*s'",
                    (int)nn, name);
            memcpy(tmp, name, nn);
            tmp[nn] = '\0';
            if (inet_pton(AF_INET6, tmp, &a6) != 1)
                return route_why(why, whysz, "bad IPv6 address '%.*s'",
                    (int)nn, name);
        } else if (route_hostname_ok(name, nn, why, whysz) == -1)
            return -1;
    } else {
        colon = memchr(s, ':', n);
        name = s;
        nn = colon != NULL ? (size_t)(colon - s) : n;
        rest = s + nn;
        if (colon != NULL && memchr(colon + 1, ':', n - nn - 1) != NULL)
            return route_why(why, whysz, "IPv6 address '%.*s' must be "
                "written in brackets, e.g. smtp:[::1]:25", (int)n, s);
        if (nn == 0)
            return route_why(why, whysz, "empty host in 'smtp:%.*s'",
                (int)n, s);
        if (route_hostname_ok(name, nn, why, whysz) == -1)
            return -1;
    }
    if (rest < s + n) {
        if (*rest != ':')
            return route_why(why, whysz, "expected ':PORT' after the host "
                "in 'smtp:%.*s'", (int)n, s);
        if (route_port(rest + 1, (size_t)(s + n - rest - 1), &h->port,
            why, whysz) == -1)
            return -1;
    }
    memcpy(h->name, name, nn);      /* nn <= 253 or < INET6_ADDRSTRLEN */
    h->name[nn] = '\0';
    return 0;
}


/* route_smtp - comma-separated "smtp:" entries (s includes the first). */
static int
route_smtp(const char *s, struct route *out, char *why, size_t whysz)
{
    const char *p = s, *end, *comma, *b, *e;
    size_t      entry = 0;

    end = s + strlen(s);
    for (;;) {
        comma = memchr(p, ',', (size_t)(end - p));
        b = p;
        e = comma != NULL ? comma : end;
        while (b < e && (*b == ' ' || *b == '\t'))
            b++;
        while (e > b && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        entry++;
        if (b == e)
            return route_why(why, whysz, "empty fail-over entry %zu", entry);
        if (!route_prefix(b, (size_t)(e - b), "smtp:"))
            return route_why(why, whysz, "fail-over entry %zu: expected "
                "'smtp:HOST:PORT', got '%.*s'", entry, (int)(e - b), b);
        if (out->nhosts == ROUTE_MAX_HOSTS)
            return route_why(why, whysz, "too many fail-over hosts (max %d)",
                ROUTE_MAX_HOSTS);
        if (route_host(b + 5, (size_t)(e - b - 5), &out->hosts[out->nhosts],
            why, whysz) == -1)
            return -1;
        out->nhosts++;
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    return 0;
}


/*
 * route_reply - "5yz 5.x.x text" for reject (class '5') or defer ('4').
 * The reply code's second digit is 0-5 (RFC 5321 4.2.1); the enhanced
 * code is class.subject.detail with 1-3 digit parts (RFC 3463).
 */
static int
route_reply(const char *word, const char *s, char cls, struct route *out,
    char *why, size_t whysz)
{
    const char *p;
    size_t      i, n, part;

    while (*s == ' ')
        s++;
    if (!(s[0] == cls && s[1] >= '0' && s[1] <= '5' && route_isdigit(
        (unsigned char)s[2]) && (s[3] == ' ' || s[3] == '\0')))
        return route_why(why, whysz, "%s needs a %cxx reply code, got '%.*s'",
            word, cls, (int)strcspn(s, " "), s);
    out->code = (s[0] - '0') * 100 + (s[1] - '0') * 10 + (s[2] - '0');
    p = s + 3;
    while (*p == ' ')
        p++;
    if (*p == '\0')
        return route_why(why, whysz, "%s: expected an enhanced status code "
            "%c.x.x after %d", word, cls, out->code);
    n = strcspn(p, " ");
    if (p[0] != cls || p[1] != '.')
        return route_why(why, whysz, "%s: enhanced status code must be "
            "%c.x.x, got '%.*s'", word, cls, (int)n, p);
    for (i = 2, part = 0; part < 2; part++) {
        size_t digits = 0;

        while (i < n && route_isdigit((unsigned char)p[i])) {
            i++;
            digits++;
        }
        if (digits < 1 || digits > 3 || (part == 0 && (i >= n || p[i] != '.'))
            || (part == 1 && i != n))
            return route_why(why, whysz, "%s: enhanced status code must be "
                "%c.x.x, got '%.*s'", word, cls, (int)n, p);
        i++;                        /* the '.' after the subject */
    }
    n = strlen(p);
    if (n > ROUTE_REPLY_MAX)
        return route_why(why, whysz, "%s: reply text too long (%zu bytes, "
            "max %d)", word, n, ROUTE_REPLY_MAX);
    for (i = 0; i < n; i++)
        if ((unsigned char)p[i] >= 0x80)
            return route_why(why, whysz, "%s: reply text must be ASCII", word);
    memcpy(out->text, p, n + 1);
    return 0;
}


int
route_pool_name_ok(const char *name)
{
    size_t i, n = name != NULL ? strlen(name) : 0;

    if (n == 0 || n > ROUTE_POOL_MAX)
        return 0;
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];

        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
            route_isdigit(c) || c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}


/*
 * route_pool - an smtp: or mx value ending in " pool=NAME": the name into
 * out->pool and the value without it into rest (1); 0 when the value has
 * no such ending (other kinds never have one: a reject: text may say
 * "pool=" and means it as text); -1 for a bad name.
 */
static int
route_pool(const char *value, struct route *out, char *rest, size_t restsz,
    char *why, size_t whysz)
{
    const char *sp = strrchr(value, ' ');
    size_t      n;

    if (sp == NULL || strncasecmp(sp + 1, "pool=", 5) != 0 ||
        !(route_prefix(value, strlen(value), "smtp:") ||
        route_prefix(value, strlen(value), "mx ")))
        return 0;
    if (!route_pool_name_ok(sp + 6))
        return route_why(why, whysz, "bad pool name '%.40s' (1-%d letters, "
            "digits, '.', '_', '-')", sp + 6, ROUTE_POOL_MAX);
    n = (size_t)(sp - value);
    while (n > 0 && (value[n - 1] == ' ' || value[n - 1] == '\t'))
        n--;
    if (n >= restsz)
        return route_why(why, whysz, "route too long");
    memcpy(rest, value, n);
    rest[n] = '\0';
    memcpy(out->pool, sp + 6, strlen(sp + 6) + 1);
    return 1;
}


int
route_parse(const char *value, struct route *out, char *why, size_t whysz)
{
    char    rest[ROUTE_VALUE_MAX + 1];
    size_t  n, i, wn;
    int     rc;

    out->kind = 0;
    out->nhosts = 0;
    out->path[0] = '\0';
    out->code = 0;
    out->text[0] = '\0';
    out->pool[0] = '\0';
    if (value == NULL || value[0] == '\0')
        return route_why(why, whysz, "empty route");
    n = strlen(value);
    if (n > ROUTE_VALUE_MAX)
        return route_why(why, whysz, "route too long (%zu bytes, max %d)",
            n, ROUTE_VALUE_MAX);
    for (i = 0; i < n; i++)
        if ((unsigned char)value[i] < 0x20 || value[i] == 0x7f)
            return route_why(why, whysz, "control character in route");
    if (value[0] == ' ' || value[n - 1] == ' ')
        return route_why(why, whysz, "leading or trailing blank in route");
    if ((rc = route_pool(value, out, rest, sizeof(rest), why, whysz)) < 0)
        return -1;
    if (rc == 1) {
        value = rest;
        n = strlen(value);
    }

    wn = strcspn(value, ":");
    if (wn == 4 && route_prefix(value, n, "smtp:")) {
        out->kind = ROUTE_SMTP;
        return route_smtp(value, out, why, whysz);
    }
    if (wn == 7 && route_prefix(value, n, "maildir:")) {
        if (n - 8 == 0)
            return route_why(why, whysz, "maildir needs a path: maildir:/PATH");
        if (n - 8 >= ROUTE_TEXT_MAX)
            return route_why(why, whysz, "maildir path too long (max %d)",
                ROUTE_TEXT_MAX - 1);
        memcpy(out->path, value + 8, n - 8 + 1);
        out->kind = ROUTE_MAILDIR;
        return 0;
    }
    if (wn == 6 && route_prefix(value, n, "reject:")) {
        out->kind = ROUTE_REJECT;
        return route_reply("reject", value + 7, '5', out, why, whysz);
    }
    if (wn == 5 && route_prefix(value, n, "defer:")) {
        out->kind = ROUTE_DEFER;
        return route_reply("defer", value + 6, '4', out, why, whysz);
    }
    if (wn == 7 && route_prefix(value, n, "discard")) {
        if (n != 7)
            return route_why(why, whysz, "discard takes no argument");
        out->kind = ROUTE_DISCARD;
        return 0;
    }
    if (wn == n && strcasecmp(value, "mx") == 0) {
        out->kind = ROUTE_MX;
        return 0;
    }
    if (wn == 2 && route_prefix(value, n, "mx:"))
        return route_why(why, whysz, "mx takes no argument (smtp:DOMAIN "
            "delivers to the MX hosts of one domain)");
    if (wn == n && (strcasecmp(value, "smtp") == 0 ||
        strcasecmp(value, "maildir") == 0 || strcasecmp(value, "reject") == 0
        || strcasecmp(value, "defer") == 0))
        return route_why(why, whysz, "'%s' needs an argument after ':' "
            "(e.g. smtp:[10.0.0.1]:25, maildir:/PATH, reject:550 5.7.1 "
            "text, defer:451 4.3.0 text)", value);
    return route_why(why, whysz, "unknown route type '%.*s' (expected smtp:, "
        "mx, maildir:, discard, reject:, defer:)", (int)(wn > 40 ? 40 : wn),
        value);
}


/*
 * route_domain_ok - "example.org", an IDNA/UTF-8 name (bytes >= 0x80 are
 * taken as they are), or, unless wild, an address literal "[10.0.0.1]" /
 * "[IPv6:::1]".
 */
static int
route_domain_ok(const char *d, size_t n, int wild, const char *key,
    char *why, size_t whysz)
{
    struct in_addr  a4;
    struct in6_addr a6;
    char    tmp[ROUTE_DOMAIN_MAX + 1];
    size_t  i, label = 0;

    if (n == 0)
        return route_why(why, whysz, "empty domain in key '%s'", key);
    if (n > ROUTE_DOMAIN_MAX)
        return route_why(why, whysz, "domain longer than %d bytes in key",
            ROUTE_DOMAIN_MAX);
    if (d[0] == '[') {
        if (wild || n < 3 || d[n - 1] != ']')
            return route_why(why, whysz, "bad address literal in key '%s'",
                key);
        memcpy(tmp, d + 1, n - 2);
        tmp[n - 2] = '\0';
        if (inet_pton(AF_INET, tmp, &a4) == 1)
            return 0;
        if (strncasecmp(tmp, "IPv6:", 5) == 0 &&
            inet_pton(AF_INET6, tmp + 5, &a6) == 1)
            return 0;
        return route_why(why, whysz, "bad address literal in key '%s' "
            "(expected [1.2.3.4] or [IPv6:::1])", key);
    }
    for (i = 0; i <= n; i++) {
        unsigned char c = i < n ? (unsigned char)d[i] : '.';

        if (c == '.') {
            if (label == 0)
                return route_why(why, whysz, "empty label in domain of key "
                    "'%s'", key);
            if (label > ROUTE_LABEL_MAX)
                return route_why(why, whysz, "label longer than %d in key "
                    "'%s'", ROUTE_LABEL_MAX, key);
            if (d[i - 1] == '-' || d[i - label] == '-')
                return route_why(why, whysz, "label starts or ends with '-' "
                    "in key '%s'", key);
            label = 0;
            continue;
        }
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
            route_isdigit(c) || c == '-' || c >= 0x80))
            return route_why(why, whysz, "bad character '%c' in domain of key "
                "'%s'", c, key);
        label++;
    }
    return 0;
}


int
route_key_check(const char *key, char *why, size_t whysz)
{
    const char *at;
    size_t      n, i;

    if (key == NULL || key[0] == '\0')
        return route_why(why, whysz, "empty key");
    n = strlen(key);
    if (n > ROUTE_KEY_MAX)
        return route_why(why, whysz, "key too long (%zu bytes, max %d)", n,
            ROUTE_KEY_MAX);
    for (i = 0; i < n; i++)
        if ((unsigned char)key[i] <= 0x20 || key[i] == 0x7f)
            return route_why(why, whysz, "space or control character in key");
    at = strchr(key, '@');
    if (at != NULL) {
        if (strchr(at + 1, '@') != NULL)
            return route_why(why, whysz, "more than one '@' in key '%s'", key);
        if (at == key)
            return route_why(why, whysz, "empty local part in key '%s'", key);
        if (at - key > ROUTE_LOCAL_MAX)
            return route_why(why, whysz, "local part longer than %d in key",
                ROUTE_LOCAL_MAX);
        return route_domain_ok(at + 1, strlen(at + 1), 0, key, why, whysz);
    }
    if (key[0] == '.') {
        if (key[1] == '\0')
            return route_why(why, whysz, "wildcard key '.' needs a domain "
                "after the dot (e.g. '.example.org')");
        return route_domain_ok(key + 1, n - 1, 1, key, why, whysz);
    }
    return route_domain_ok(key, n, 0, key, why, whysz);
}


int
route_host_mx(const struct route_host *h)
{
    struct in_addr a4;

    return !h->literal && inet_pton(AF_INET, h->name, &a4) != 1;
}


void
route_key_normalize(char *key)
{
    for (; *key != '\0'; key++)
        if (*key >= 'A' && *key <= 'Z')
            *key = (char)(*key - 'A' + 'a');
}


/*
 * route_line_parse - "KEY ROUTE" (see route.h).  The key is checked
 * before it is named in a reason, so a reason never carries a control
 * byte of the line; a NUL before len would hide the rest of the line
 * from the check (an entry other than the one written): refused.
 */
int
route_line_parse(char *line, size_t len, char **key, char **value,
    char *why, size_t whysz)
{
    char   *p = line, *e, *k;
    char    rwhy[256];
    struct route rt;

    if (memchr(line, '\0', len) != NULL)
        return route_why(why, whysz, "NUL byte in line");
    p[strcspn(p, "\r\n")] = '\0';
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p == '\0' || *p == '#')
        return 0;
    e = p + strlen(p);
    while (e > p && (e[-1] == ' ' || e[-1] == '\t'))
        *--e = '\0';
    k = p;
    p += strcspn(p, " \t");
    if (*p != '\0')
        *p++ = '\0';
    if (route_key_check(k, rwhy, sizeof(rwhy)) == -1)
        return route_why(why, whysz, "bad key: %s", rwhy);
    if (*p == '\0')
        return route_why(why, whysz, "missing route after key '%s'", k);
    while (*p == ' ' || *p == '\t')
        p++;
    if (route_parse(p, &rt, rwhy, sizeof(rwhy)) == -1)
        return route_why(why, whysz, "bad route for '%s': %s", k, rwhy);
    *key = k;
    *value = p;
    return 1;
}
