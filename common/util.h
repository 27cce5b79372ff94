/*
 * util.h - small helpers every module uses: allocation that never fails,
 * fatal exits, clocks, and parsers for the value types of relay.yaml.
 *
 * CONTRACT  x*alloc abort on OOM.  fatal()/fatalx() write to stderr (and
 *           best-effort to the log process), then exit(1).
 * FAILURE   util_parse_* return 0 or -1 (value untouched on -1).
 */
#ifndef MTAD_UTIL_H
#define MTAD_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <netinet/in.h>

#define MTA_OK      0
#define MTA_ERR    (-1)
#define MTA_AGAIN  (-2)

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

void   *xmalloc(size_t n);
void   *xcalloc(size_t n, size_t sz);
void   *xrealloc(void *p, size_t n);
char   *xstrdup(const char *s);
char   *xstrndup(const char *s, size_t n);

void    fatal(const char *fmt, ...)
            __attribute__((format(printf, 1, 2), noreturn));  /* + errno */
void    fatalx(const char *fmt, ...)
            __attribute__((format(printf, 1, 2), noreturn));

uint64_t util_now_ms(void);         /* CLOCK_MONOTONIC, milliseconds */
uint64_t util_wall_ms(void);        /* CLOCK_REALTIME, milliseconds */

/* "50M", "512K", "1G", "1234" -> bytes. */
int     util_parse_size(const char *s, uint64_t *out);
/* "30s", "5m", "1h", "5d", "100ms" -> milliseconds. Bare numbers: seconds. */
int     util_parse_duration(const char *s, uint64_t *out_ms);

/* "127.0.0.1:2525", "[::1]:25", "0.0.0.0:25" -> sockaddr. */
int     util_parse_hostport(const char *s, struct sockaddr_storage *ss,
            socklen_t *len);

/* CIDR networks, v4 and v6 ("127.0.0.0/8", "::1/128", "10.1.2.3"). */
struct cidr {
    int      family;                /* AF_INET or AF_INET6 */
    uint8_t  addr[16];
    unsigned prefix;
};
int     util_parse_cidr(const char *s, struct cidr *out);
int     util_cidr_match(const struct cidr *c, const struct sockaddr *sa);

/* "[1.2.3.4]:5678" / "[::1]:25" text for logs; returns buf. */
const char *util_sockaddr_str(const struct sockaddr *sa, char *buf,
            size_t bufsz);
/* Address only ("127.0.0.1"); returns buf. */
const char *util_sockaddr_ip(const struct sockaddr *sa, char *buf,
            size_t bufsz);

/* snprintf-into-fixed-buffer that always terminates; returns strlen. */
size_t  util_strlcpy(char *dst, const char *src, size_t dstsz);

/* Write all of buf to a blocking fd; 0 or -1 (errno). */
int     util_write_all(int fd, const void *buf, size_t n);

/* util_escape - src[0..n) made safe to print: for a log line, a header, a
 * DSN or a terminal, whatever bytes the network sent.  C0 controls, DEL,
 * C1 controls (U+0080..U+009F as UTF-8, e.g. the 8-bit CSI "\xc2\x9b") and
 * bytes that are not part of valid UTF-8 become "\xHH", one per byte;
 * printable ASCII and valid UTF-8 stay (so escaping is idempotent: a
 * backslash is left alone).  With UTIL_ESC_LINES, LF, CR right before LF
 * and TAB stay too (multi-line text for a terminal).  dst (dstsz > 0) is
 * always terminated; output stops before an escape or character that
 * does not fit.  *used (may be NULL) gets the src bytes consumed.
 * Returns strlen(dst).  UTIL_ESC_ROOM(n): room that never truncates. */
#define UTIL_ESC_LINES     0x1u
#define UTIL_ESC_ROOM(n)   (4 * (n) + 1)
size_t  util_escape(char *dst, size_t dstsz, const char *src, size_t n,
            unsigned flags, size_t *used);

#endif /* MTAD_UTIL_H */
