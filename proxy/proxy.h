/*
 * proxy.h - the PROXY protocol header (HAProxy's, versions 1 and 2) that a
 * TCP load balancer sends before the client's bytes, naming the client.
 *
 * CONTRACT  Pure: proxy_parse() reads bytes from a buffer and does no I/O,
 *           no allocation, no logging.  It is fed the bytes received so far
 *           (from the first byte of the connection) and answers:
 *             PROXY_OK     a header; h->len is its whole length in bytes.
 *                          Version 1: h->len <= n (the line with its CRLF).
 *                          Version 2: the 16-byte head and the address
 *                          block were in the buffer; h->len may exceed n,
 *                          the rest being TLVs that the caller reads and
 *                          drops (they are not interpreted).
 *             PROXY_AGAIN  no verdict yet, and every one of the n bytes
 *                          belongs to the header: the caller may consume
 *                          them all and must read more.  Never returned
 *                          once n >= PROXY_NEED_MAX.
 *             PROXY_EBAD   not a header of an allowed version, or a
 *                          malformed one; *why says what, in a static
 *                          string of printable ASCII (no input is echoed).
 *           A caller that reads at most PROXY_NEED_MAX bytes, never past
 *           the end of the header (MSG_PEEK then consume what belongs to
 *           it), leaves the client's first bytes unread on the socket.
 *           h->local: the sender gave no client address (v1 "UNKNOWN", v2
 *           LOCAL command or AF_UNSPEC): the connection's own peer is the
 *           client (the spec's rule; HAProxy's health checks do this).
 *           v2 AF_UNIX and non-stream transports are refused: an SMTP
 *           listener has no use for them and no address to check.
 * FAILURE   Never crashes on any input; returns PROXY_OK, PROXY_AGAIN or
 *           PROXY_EBAD.
 */
#ifndef MTAD_PROXY_H
#define MTAD_PROXY_H

#include <stddef.h>
#include <sys/socket.h>

enum proxy_rc { PROXY_OK = 0, PROXY_AGAIN = -2, PROXY_EBAD = -3 };

/* allowed versions, a mask (relay.yaml proxy_protocol: v1 | v2 | auto) */
#define PROXY_V1      1u
#define PROXY_V2      2u
#define PROXY_AUTO    (PROXY_V1 | PROXY_V2)

#define PROXY_V1_MAX   107          /* longest v1 line, CRLF included */
#define PROXY_V2_HEAD  16           /* signature, ver/cmd, family, length */
/* The most bytes proxy_parse() needs for a verdict: the v2 head and the
 * largest address block it reads (two IPv6 addresses and ports). */
#define PROXY_NEED_MAX (PROXY_V2_HEAD + 36 > PROXY_V1_MAX ? \
                        PROXY_V2_HEAD + 36 : PROXY_V1_MAX)

struct proxy_hdr {
    unsigned                version;    /* 1 or 2 */
    int                     local;      /* no client address given */
    struct sockaddr_storage src;        /* the client (unless local) */
    socklen_t               srclen;
    struct sockaddr_storage dst;        /* the address it connected to */
    socklen_t               dstlen;
    size_t                  len;        /* whole header, TLVs included */
};

int proxy_parse(const void *buf, size_t n, unsigned versions,
        struct proxy_hdr *h, const char **why);

/* "v1", "v2", "auto" -> mask; 0 for anything else. */
unsigned proxy_mode_parse(const char *s);
const char *proxy_mode_name(unsigned versions);   /* "v1", "v2", "auto" */

#endif /* MTAD_PROXY_H */
