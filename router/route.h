/*
 * route.h - route values: parse and format, no I/O (pure; used by config,
 * router, the delivery code and mtactl).
 *
 *   smtp:[host]:port          host taken literally (no MX lookup; its
 *                             A/AAAA are used)
 *   smtp:host:port            the MX hosts of "host" (RFC 5321 5.1), as
 *                             Postfix; an unbracketed IPv4 address is
 *                             used as it is.  route_host_mx() says which.
 *   mx                        the MX hosts of each recipient's own domain
 *   smtp:a:25,smtp:[b]:2525   fail-over list, tried in order (max 8)
 *                             (":port" may be left out: 25; IPv6 only in
 *                             brackets, smtp:[::1]:25 or smtp:[IPv6:::1]:25,
 *                             name stored without brackets or "IPv6:")
 *   maildir:/path             local delivery into a Maildir
 *   discard                   accept and drop (logged)
 *   reject:5xx x.y.z text     answered at RCPT
 *   defer:4xx x.y.z text      answered at RCPT
 *   smtp:... pool=NAME        an smtp: or mx route may end in one
 *   mx pool=NAME              " pool=NAME": its mail leaves through the
 *                             egress pool NAME (relay.yaml egress.pools;
 *                             letters, digits, '.', '_', '-', at most
 *                             ROUTE_POOL_MAX bytes).  Without it: the
 *                             sender's pool, else egress.default_pool.
 *
 * CONTRACT  route_parse() fills a struct route whose strings point into
 *           the route's own storage (no allocation, no pointers into the
 *           input).  Keys: route_key_check() accepts "user@domain",
 *           "domain", ".domain"; route_key_normalize() lower-cases.
 * FAILURE   0, or -1 with a one-line reason in why.
 */
#ifndef MTAD_ROUTE_H
#define MTAD_ROUTE_H

#include <stddef.h>

#define ROUTE_MAX_HOSTS  8
#define ROUTE_TEXT_MAX   512
#define ROUTE_VALUE_MAX  1023       /* bytes of a route value (no NUL) */
#define ROUTE_KEY_MAX    319        /* bytes of a key (no NUL) */
#define ROUTE_POOL_MAX   63         /* bytes of an egress pool name */

enum route_kind {
    ROUTE_SMTP = 1, ROUTE_MAILDIR, ROUTE_DISCARD, ROUTE_REJECT, ROUTE_DEFER,
    ROUTE_MX                        /* "mx": by each recipient's domain */
};

struct route_host {
    char            name[256];      /* host name or address, no brackets */
    unsigned        port;
    int             literal;        /* written as [host]: no MX lookup */
};

struct route {
    enum route_kind kind;
    size_t          nhosts;                    /* ROUTE_SMTP */
    struct route_host hosts[ROUTE_MAX_HOSTS];
    char            path[ROUTE_TEXT_MAX];      /* ROUTE_MAILDIR */
    int             code;                      /* ROUTE_REJECT/DEFER: 550 */
    char            text[ROUTE_TEXT_MAX];      /* "5.7.1 no such user" */
    char            pool[ROUTE_POOL_MAX + 1];  /* SMTP/MX: " pool=NAME",
                                                  or "" */
};

int     route_parse(const char *value, struct route *out, char *why,
            size_t whysz);
/* 1 when name is a valid egress pool or source name (1..ROUTE_POOL_MAX
 * bytes of letters, digits, '.', '_', '-'), else 0. */
int     route_pool_name_ok(const char *name);
int     route_key_check(const char *key, char *why, size_t whysz);
void    route_key_normalize(char *key);  /* lower-case in place */
/* route_line_parse - one line of a routes file, as mtactl route import
 * reads and route export prints it: "KEY ROUTE", blanks or tabs between,
 * leading and trailing blanks and the line end ignored.  line is len
 * bytes with a NUL after them (getline's), changed in place; a NUL
 * inside is refused.  1 for an entry (*key and *value point into line,
 * checked by route_key_check() and route_parse()), 0 for a blank or
 * comment ("#") line, -1 with a one-line reason without a control byte. */
int     route_line_parse(char *line, size_t len, char **key, char **value,
            char *why, size_t whysz);
/* 1 when delivery to h looks up the MX of h->name (smtp:host without
 * brackets, not an IPv4 address), 0 when h->name is the host itself. */
int     route_host_mx(const struct route_host *h);

#endif /* MTAD_ROUTE_H */
