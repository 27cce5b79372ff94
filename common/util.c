/*
 * util.c - allocation that never fails, fatal exits, clocks, and the value
 * parsers of relay.yaml (sizes, durations, host:port, CIDR networks).
 *
 * CONTRACT  See common/util.h.  The parsers are strict: the whole string
 *           must match (no leading or trailing blanks, no signs), numbers
 *           are decimal, and overflow is an error, never a wrap.
 * FAILURE   x*alloc abort() on OOM (a half-allocated relay is worse than a
 *           core file).  fatal()/fatalx() write one line to stderr, send it
 *           best-effort to the log process when one is open, then exit(1).
 *           util_parse_* return 0 or -1 and leave *out untouched on -1.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

/*
 * fatal() forwards to the log process only when log.o is linked into the
 * program: weak references keep util.o usable alone (unit tests, mtactl)
 * without dragging the log module in.
 */
#pragma weak log_fd
#pragma weak log_msg

static void __attribute__((noreturn))
util_oom(size_t n)
{
    char msg[96];
    int len;

    len = snprintf(msg, sizeof(msg), "mtad: out of memory (%zu bytes)\n", n);
    if (len > 0)
        (void)util_write_all(STDERR_FILENO, msg, (size_t)len);
    abort();
}

void *
xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);

    if (p == NULL)
        util_oom(n);
    return p;
}

void *
xcalloc(size_t n, size_t sz)
{
    void *p;

    if (n == 0 || sz == 0)
        n = sz = 1;
    p = calloc(n, sz);
    if (p == NULL)
        util_oom(n * sz);
    return p;
}

void *
xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);

    if (q == NULL)
        util_oom(n);
    return q;
}

char *
xstrdup(const char *s)
{
    return xstrndup(s, strlen(s));
}

char *
xstrndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *p = xmalloc(len + 1);

    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

/* Shared tail of fatal()/fatalx(): errnum 0 means "no strerror part". */
static void __attribute__((noreturn))
util_vfatal(int errnum, const char *fmt, va_list ap)
{
    char msg[1024], line[1200];
    int len;

    (void)vsnprintf(msg, sizeof(msg), fmt, ap);
    if (errnum != 0)
        len = snprintf(line, sizeof(line), "mtad: %s: %s\n", msg,
            strerror(errnum));
    else
        len = snprintf(line, sizeof(line), "mtad: %s\n", msg);
    if (len < 0)
        len = 0;
    if ((size_t)len >= sizeof(line))
        len = sizeof(line) - 1;
    (void)util_write_all(STDERR_FILENO, line, (size_t)len);

    /* Best effort: the log process keeps the record with the others. */
    if (log_fd != NULL && log_msg != NULL && log_fd() >= 0) {
        line[len > 0 ? len - 1 : 0] = '\0';
        log_msg(LOGL_ERR, "%s", line + 6);      /* without "mtad: " */
    }
    exit(1);
}

void
fatal(const char *fmt, ...)
{
    int errnum = errno;
    va_list ap;

    va_start(ap, fmt);
    util_vfatal(errnum, fmt, ap);
}

void
fatalx(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    util_vfatal(0, fmt, ap);
}

static uint64_t
util_clock_ms(clockid_t id)
{
    struct timespec ts;

    (void)clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t
util_now_ms(void)
{
    return util_clock_ms(CLOCK_MONOTONIC);
}

uint64_t
util_wall_ms(void)
{
    return util_clock_ms(CLOCK_REALTIME);
}

/*
 * Leading decimal digits of s into *v; returns the number of digits used,
 * 0 when there are none or the value does not fit in 64 bits.
 */
static size_t
util_parse_digits(const char *s, uint64_t *v)
{
    uint64_t n = 0;
    size_t i;

    for (i = 0; s[i] >= '0' && s[i] <= '9'; i++) {
        unsigned d = (unsigned)(s[i] - '0');

        if (n > (UINT64_MAX - d) / 10)
            return 0;
        n = n * 10 + d;
    }
    *v = n;
    return i;
}

/* n * mul without overflow; -1 if it would wrap. */
static int
util_mul(uint64_t n, uint64_t mul, uint64_t *out)
{
    if (mul != 0 && n > UINT64_MAX / mul)
        return -1;
    *out = n * mul;
    return 0;
}

int
util_parse_size(const char *s, uint64_t *out)
{
    uint64_t n, mul;
    size_t i;

    i = util_parse_digits(s, &n);
    if (i == 0)
        return -1;
    switch (s[i]) {
    case '\0':          mul = 1; break;
    case 'K': case 'k': mul = 1024; break;
    case 'M': case 'm': mul = 1024 * 1024; break;
    case 'G': case 'g': mul = 1024 * 1024 * 1024; break;
    default:            return -1;
    }
    if (s[i] != '\0' && s[i + 1] != '\0')
        return -1;
    return util_mul(n, mul, out);
}

int
util_parse_duration(const char *s, uint64_t *out_ms)
{
    static const struct { const char *unit; uint64_t ms; } units[] = {
        { "",   1000 },             /* bare number: seconds */
        { "ms", 1 },
        { "s",  1000 },
        { "m",  60 * 1000 },
        { "h",  60 * 60 * 1000 },
        { "d",  24 * 60 * 60 * 1000 },
    };
    uint64_t n;
    size_t i, u;

    i = util_parse_digits(s, &n);
    if (i == 0)
        return -1;
    for (u = 0; u < ARRAY_LEN(units); u++)
        if (strcmp(s + i, units[u].unit) == 0)
            return util_mul(n, units[u].ms, out_ms);
    return -1;
}

/* Port text: decimal 1..65535, nothing else. */
static int
util_parse_port(const char *s, in_port_t *port)
{
    uint64_t n;
    size_t i;

    i = util_parse_digits(s, &n);
    if (i == 0 || i > 5 || s[i] != '\0' || n == 0 || n > 65535)
        return -1;
    *port = htons((uint16_t)n);
    return 0;
}

int
util_parse_hostport(const char *s, struct sockaddr_storage *ss,
    socklen_t *len)
{
    char host[INET6_ADDRSTRLEN + 1];
    const char *colon, *port;
    struct sockaddr_in sin;
    struct sockaddr_in6 sin6;
    size_t hlen;

    if (s[0] == '[') {
        /* "[v6]:port": the brackets keep the v6 colons apart. */
        const char *end = strchr(s, ']');

        if (end == NULL || end[1] != ':')
            return -1;
        hlen = (size_t)(end - s - 1);
        port = end + 2;
        if (hlen == 0 || hlen >= sizeof(host))
            return -1;
        memcpy(host, s + 1, hlen);
        host[hlen] = '\0';
        memset(&sin6, 0, sizeof(sin6));
        sin6.sin6_family = AF_INET6;
        if (inet_pton(AF_INET6, host, &sin6.sin6_addr) != 1 ||
            util_parse_port(port, &sin6.sin6_port) != 0)
            return -1;
        memset(ss, 0, sizeof(*ss));
        memcpy(ss, &sin6, sizeof(sin6));
        *len = sizeof(sin6);
        return 0;
    }

    /* "a.b.c.d:port" or "*:port" (every IPv4 address). */
    colon = strchr(s, ':');
    if (colon == NULL || strchr(colon + 1, ':') != NULL)
        return -1;
    hlen = (size_t)(colon - s);
    if (hlen == 0 || hlen >= sizeof(host))
        return -1;
    memcpy(host, s, hlen);
    host[hlen] = '\0';
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    if (strcmp(host, "*") == 0)
        sin.sin_addr.s_addr = htonl(INADDR_ANY);
    else if (inet_pton(AF_INET, host, &sin.sin_addr) != 1)
        return -1;
    if (util_parse_port(colon + 1, &sin.sin_port) != 0)
        return -1;
    memset(ss, 0, sizeof(*ss));
    memcpy(ss, &sin, sizeof(sin));
    *len = sizeof(sin);
    return 0;
}

/* Clear the bits after prefix, so "10.1.2.3/8" is stored as 10.0.0.0/8. */
static void
util_cidr_mask(uint8_t *addr, size_t alen, unsigned prefix)
{
    size_t i;

    for (i = 0; i < alen; i++) {
        unsigned bits = prefix > i * 8 ? prefix - (unsigned)i * 8 : 0;

        if (bits < 8)
            addr[i] &= (uint8_t)(0xff00u >> bits);
    }
}

int
util_parse_cidr(const char *s, struct cidr *out)
{
    char host[INET6_ADDRSTRLEN + 1];
    const char *slash = strchr(s, '/');
    struct cidr c;
    size_t hlen, alen;
    uint64_t prefix;

    hlen = slash != NULL ? (size_t)(slash - s) : strlen(s);
    if (hlen == 0 || hlen >= sizeof(host))
        return -1;
    memcpy(host, s, hlen);
    host[hlen] = '\0';

    memset(&c, 0, sizeof(c));
    if (inet_pton(AF_INET, host, c.addr) == 1) {
        c.family = AF_INET;
        alen = 4;
    } else if (inet_pton(AF_INET6, host, c.addr) == 1) {
        c.family = AF_INET6;
        alen = 16;
    } else
        return -1;

    prefix = alen * 8;
    if (slash != NULL) {
        size_t i = util_parse_digits(slash + 1, &prefix);

        if (i == 0 || i > 3 || slash[1 + i] != '\0' || prefix > alen * 8)
            return -1;
    }
    c.prefix = (unsigned)prefix;
    util_cidr_mask(c.addr, alen, c.prefix);
    *out = c;
    return 0;
}

/* First prefix bits of a and b equal? */
static int
util_prefix_eq(const uint8_t *a, const uint8_t *b, unsigned prefix)
{
    unsigned full = prefix / 8, rest = prefix % 8;

    if (memcmp(a, b, full) != 0)
        return 0;
    if (rest == 0)
        return 1;
    return ((a[full] ^ b[full]) & (0xff00u >> rest)) == 0;
}

static const uint8_t util_v4mapped[12] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff
};

/*
 * A dual-stack listener sees IPv4 clients as ::ffff:a.b.c.d; they must
 * match IPv4 networks, and an IPv4 client matches a v6 network that covers
 * its mapped form (e.g. ::ffff:0:0/96).
 */
int
util_cidr_match(const struct cidr *c, const struct sockaddr *sa)
{
    uint8_t a[16];

    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)sa;

        if (c->family == AF_INET)
            return util_prefix_eq(c->addr,
                (const uint8_t *)&sin->sin_addr, c->prefix);
        memcpy(a, util_v4mapped, 12);
        memcpy(a + 12, &sin->sin_addr, 4);
        return util_prefix_eq(c->addr, a, c->prefix);
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)sa;

        memcpy(a, &sin6->sin6_addr, 16);
        if (c->family == AF_INET6)
            return util_prefix_eq(c->addr, a, c->prefix);
        if (memcmp(a, util_v4mapped, 12) == 0)
            return util_prefix_eq(c->addr, a + 12, c->prefix);
    }
    return 0;
}

const char *
util_sockaddr_ip(const struct sockaddr *sa, char *buf, size_t bufsz)
{
    const void *addr;

    switch (sa->sa_family) {
    case AF_INET:
        addr = &((const struct sockaddr_in *)sa)->sin_addr;
        break;
    case AF_INET6:
        addr = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        break;
    case AF_UNIX:
        util_strlcpy(buf, "unix", bufsz);
        return buf;
    default:
        util_strlcpy(buf, "?", bufsz);
        return buf;
    }
    if (inet_ntop(sa->sa_family, addr, buf, (socklen_t)bufsz) == NULL)
        util_strlcpy(buf, "?", bufsz);
    return buf;
}

const char *
util_sockaddr_str(const struct sockaddr *sa, char *buf, size_t bufsz)
{
    char ip[INET6_ADDRSTRLEN];
    unsigned port;

    switch (sa->sa_family) {
    case AF_INET:
        port = ntohs(((const struct sockaddr_in *)sa)->sin_port);
        break;
    case AF_INET6:
        port = ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
        break;
    default:
        return util_sockaddr_ip(sa, buf, bufsz);
    }
    util_sockaddr_ip(sa, ip, sizeof(ip));
    (void)snprintf(buf, bufsz, "[%s]:%u", ip, port);
    return buf;
}

/* BSD strlcpy: returns strlen(src), so a result >= dstsz means truncated. */
size_t
util_strlcpy(char *dst, const char *src, size_t dstsz)
{
    size_t len = strlen(src);

    if (dstsz > 0) {
        size_t n = len < dstsz - 1 ? len : dstsz - 1;

        memcpy(dst, src, n);
        dst[n] = '\0';
    }
    return len;
}

int
util_write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;

    while (n > 0) {
        ssize_t w = write(fd, p, n);

        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}


/* util_utf8_len - the length of the valid UTF-8 character at p (at most
 * n bytes, at least 2: p[0] >= 0x80), or 0.  Overlongs, surrogates, code
 * points above U+10FFFF and C1 controls (U+0080..U+009F) are 0. */
static size_t
util_utf8_len(const unsigned char *p, size_t n)
{
    unsigned char lo = 0x80, hi = 0xbf;
    size_t        len, i;

    if (p[0] >= 0xc2 && p[0] <= 0xdf) {
        len = 2;
        if (p[0] == 0xc2)
            lo = 0xa0;                  /* U+0080..U+009F: C1 controls */
    } else if (p[0] >= 0xe0 && p[0] <= 0xef) {
        len = 3;
        lo = p[0] == 0xe0 ? 0xa0 : 0x80;
        hi = p[0] == 0xed ? 0x9f : 0xbf;
    } else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
        len = 4;
        lo = p[0] == 0xf0 ? 0x90 : 0x80;
        hi = p[0] == 0xf4 ? 0x8f : 0xbf;
    } else {
        return 0;
    }
    if (n < len || p[1] < lo || p[1] > hi)
        return 0;
    for (i = 2; i < len; i++)
        if (p[i] < 0x80 || p[i] > 0xbf)
            return 0;
    return len;
}


size_t
util_escape(char *dst, size_t dstsz, const char *src, size_t n,
    unsigned flags, size_t *used)
{
    static const char   hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)src;
    size_t              i = 0, o = 0, len;

    while (i < n) {
        unsigned char c = p[i];

        if (c >= 0x20 && c < 0x7f) {
            len = 1;
        } else if ((flags & UTIL_ESC_LINES) && (c == '\n' || c == '\t' ||
            (c == '\r' && i + 1 < n && p[i + 1] == '\n'))) {
            len = 1;
        } else if (c >= 0x80 && (len = util_utf8_len(p + i, n - i)) > 0) {
            ;                           /* a whole printable character */
        } else {
            if (dstsz - o < 5)
                break;
            dst[o++] = '\\';
            dst[o++] = 'x';
            dst[o++] = hex[c >> 4];
            dst[o++] = hex[c & 0xf];
            i++;
            continue;
        }
        if (dstsz - o < len + 1)
            break;
        memcpy(dst + o, p + i, len);
        o += len;
        i += len;
    }
    dst[o] = '\0';
    if (used != NULL)
        *used = i;
    return o;
}
