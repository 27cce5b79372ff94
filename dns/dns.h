/*
 * dns.h - asynchronous DNS for delivery and the pre-greeting DNS lists:
 * MX (RFC 5321 5.1), A/AAAA, TLSA, TXT and DNSBL names, resolved with
 * c-ares inside the process's own ev loop, with a per-process cache.
 *
 * WHY C-ARES  c-ares hands us its sockets (ARES_OPT_SOCK_STATE_CB) and a
 *           timeout, so lookups run in the worker's epoll loop with no
 *           thread or process per lookup and no helper thread at all
 *           (libunbound's async mode needs a thread or a forked helper).
 *           DNSSEC: like Postfix (smtp_dns_support_level = dnssec) we do
 *           not validate ourselves; we set the AD bit in every query
 *           (RFC 6840 5.7) and trust the AD bit of the answer from a local
 *           validating resolver (unbound on 127.0.0.1).  dns.servers must
 *           therefore name a resolver on a trusted path for `secure` to
 *           mean anything.
 *
 * CONTRACT  One struct dns per process, bound to one ev loop.  Every
 *           lookup completes through its callback exactly once, always
 *           from the loop (never inside the call that started it, even on
 *           a cache hit), unless dns_cancel() or dns_free() came first:
 *           then it is never called.  The result passed to a callback
 *           belongs to the callee: free it with dns_dest_free() /
 *           dns_rrset_free().
 *           Lookups of the same name and type in flight at once share one
 *           query; answers are cached for their TTL clamped to
 *           [min_ttl, max_ttl]; NXDOMAIN and NODATA are cached for the SOA
 *           minimum (RFC 2308) clamped the same way; temporary failures
 *           are not cached.  The cache holds at most cache_max rrsets and
 *           evicts the least recently used.
 *           MX: sorted by preference, equal preferences in random order;
 *           no MX -> the domain itself (implicit MX, preference 0); CNAMEs
 *           are followed (8 at most); a null MX "0 ." (RFC 7505) -> status
 *           DNS_NULLMX; addresses per host in the `prefer` family first,
 *           at most address_limit addresses in all.
 * FAILURE   Never logs.  Functions return 0 or a negative DNS_E* code;
 *           dns_strerror() names it.  A lookup's outcome is in the result's
 *           status, with a one-line reason in `why`.
 */
#ifndef MTAD_DNS_H
#define MTAD_DNS_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct ev_loop;
struct dns;                         /* one per process */
struct dns_req;                     /* one lookup in flight */

#define DNS_EINVAL   (-1)           /* bad argument (name, option) */
#define DNS_ESYS     (-2)           /* c-ares init failed, no memory */
#define DNS_ESERVERS (-3)           /* bad dns.servers entry */

enum dns_family { DNS_BOTH = 0, DNS_IPV4 = 1, DNS_IPV6 = 2 };

enum dns_status {
    DNS_OK = 0,                     /* at least one record / address */
    DNS_NULLMX,                     /* RFC 7505: domain accepts no mail */
    DNS_NXDOMAIN,                   /* the name does not exist */
    DNS_NODATA,                     /* name exists, no record of the type;
                                       for MX: no MX host has an address */
    DNS_TEMPFAIL                    /* SERVFAIL, timeout, refused, ... */
};

/* DNS types used here (RFC 1035, 3596, 6698). */
#define DNS_T_A      1
#define DNS_T_CNAME  5
#define DNS_T_SOA    6
#define DNS_T_MX     15
#define DNS_T_TXT    16
#define DNS_T_AAAA   28
#define DNS_T_TLSA   52

#define DNS_NAME_MAX 256            /* a presentation name, with NUL */

struct dns_options {
    const char     *servers;        /* "1.2.3.4, 127.0.0.1:5353, [::1]:53";
                                       NULL or "" = /etc/resolv.conf */
    unsigned        timeout_ms;     /* per try; 0 = 5000 */
    unsigned        attempts;       /* tries per server; 0 = 2 */
    uint32_t        min_ttl;        /* seconds; default 0 */
    uint32_t        max_ttl;        /* seconds; 0 = 86400 */
    size_t          cache_max;      /* rrsets; 0 = 10000 */
    enum dns_family family;         /* which addresses to use; DNS_BOTH */
    enum dns_family prefer;         /* which first; DNS_IPV4 (DNS_BOTH =
                                       as the answers come: v4 then v6) */
    size_t          address_limit;  /* addresses per destination; 0 = 5 */
};

struct dns_addr {
    int                      family; /* AF_INET or AF_INET6 */
    union {
        struct in_addr       v4;
        struct in6_addr      v6;
    }                        a;
};

struct dns_host {
    char             name[DNS_NAME_MAX]; /* MX exchange as in the MX record
                                       (CNAMEs followed for addresses) */
    unsigned         pref;          /* MX preference (0 for implicit MX) */
    uint32_t         ttl;           /* seconds left of its addresses */
    enum dns_status  status;        /* of its address lookups */
    int              secure;        /* every address answer had AD=1 */
    size_t           naddr;
    struct dns_addr *addr;          /* in the order to try */
    char             target[DNS_NAME_MAX]; /* name after the CNAMEs of its
                                       address answers ("" when unknown:
                                       then name); the TLSA base domain
                                       of RFC 7672 2.2.3 */
};

struct dns_dest {
    enum dns_status  status;
    char             why[256];      /* reason when status != DNS_OK */
    char             domain[DNS_NAME_MAX]; /* as asked */
    char             name[DNS_NAME_MAX];   /* after CNAMEs */
    int              implicit;      /* no MX: the domain's own addresses */
    int              secure;        /* the MX answer (and CNAMEs) had AD=1 */
    uint32_t         ttl;           /* seconds left of the MX rrset */
    size_t           nhost;
    struct dns_host *host;          /* in the order to try */
};

struct dns_rr {
    uint16_t         type;
    uint32_t         ttl;           /* as received */
    size_t           len;
    unsigned char   *rdata;         /* raw RDATA (names not expanded) */
};

struct dns_rrset {
    enum dns_status  status;
    char             why[256];
    char             name[DNS_NAME_MAX]; /* asked, e.g. _25._tcp.mx.x.org */
    int              secure;        /* AD=1 on every answer used */
    uint32_t         ttl;           /* seconds left */
    size_t           n;
    struct dns_rr   *rr;
};

struct dns_tlsa {
    uint8_t              usage, selector, mtype;
    const unsigned char *data;      /* into the rdata */
    size_t               len;
};

typedef void dns_dest_fn(struct dns_dest *dest, void *arg);
typedef void dns_rrset_fn(struct dns_rrset *set, void *arg);

void        dns_options_default(struct dns_options *o);
int         dns_new(struct dns **dp, struct ev_loop *loop,
                const struct dns_options *o, char *why, size_t whysz);
void        dns_free(struct dns *d);   /* cancels all; NULL ok */
const char *dns_strerror(int rc);
const char *dns_status_name(enum dns_status s); /* "ok", "nxdomain"... */

/* The MX destination of domain (RFC 5321 5.1).  *reqp (may be NULL) is
 * the handle for dns_cancel(), valid until the callback runs.  domain is
 * an LDH name (a final dot and upper case are fine); address literals,
 * U-labels and anything else give DNS_EINVAL and no callback. */
int         dns_mx(struct dns *d, const char *domain, dns_dest_fn *fn,
                void *arg, struct dns_req **reqp);
/* The addresses of one host, as a destination with one host (pref 0):
 * for smtp:[host] routes. */
int         dns_host(struct dns *d, const char *host, dns_dest_fn *fn,
                void *arg, struct dns_req **reqp);
/* Raw records of type for name (CNAMEs followed): TXT, TLSA, ... */
int         dns_query(struct dns *d, const char *name, uint16_t type,
                dns_rrset_fn *fn, void *arg, struct dns_req **reqp);
/* TLSA of _PORT._tcp.host. */
int         dns_tlsa(struct dns *d, const char *host, unsigned port,
                dns_rrset_fn *fn, void *arg, struct dns_req **reqp);
void        dns_cancel(struct dns_req *r);

void        dns_dest_free(struct dns_dest *dest);   /* NULL ok */
void        dns_rrset_free(struct dns_rrset *set);  /* NULL ok */
int         dns_tlsa_parse(const struct dns_rr *rr, struct dns_tlsa *out);
/* TXT rdata as one string (character-strings joined, RFC 7208 3.3);
 * bytes < 0x20 or >= 0x7f kept as they are: escape before printing. */
int         dns_txt_join(const struct dns_rr *rr, char *out, size_t outsz);
void        dns_addr_str(const struct dns_addr *a, char *out, size_t outsz);

/* DNS lists (DNSBL / DNSWL, RFC 5782; rbl.c).  A list is asked with
 * dns_query(name, DNS_T_A) for the name dns_rbl_name() gives: the IPv4
 * octets reversed ("2.0.0.127.<zone>"), an IPv6 address as 32 nibbles,
 * least significant first (RFC 5782 2.4).  0, or DNS_EINVAL (another
 * family, or no room in outsz). */
int         dns_rbl_name(const struct sockaddr *sa, const char *zone,
                char *out, size_t outsz);
/* Which answers count, as postscreen writes it after "zone=": four dotted
 * octets, each a number or a bracketed list of numbers and ranges
 * separated by ';' ("127.0.0.[2..11]", "127.0.[0..255].[1;3..4]"). */
struct dns_rbl_filter {
    uint8_t         bits[4][32];        /* a 256-bit set per octet */
};
int         dns_rbl_filter_parse(const char *spec, struct dns_rbl_filter *f);
/* f NULL: every address counts. */
int         dns_rbl_filter_match(const struct dns_rbl_filter *f,
                const unsigned char a[4]);
/* 1 when set (an A lookup's answer) holds an address f counts. */
int         dns_rbl_listed(const struct dns_rrset *set,
                const struct dns_rbl_filter *f);

/* ---- the parts below are for tests and the fuzz target ---- */

/* A parsed DNS answer (names lower-cased, without the final dot). */
struct dns_msg_rr {
    char           *owner;              /* allocated: cached answers hold
                                           only the bytes they need */
    uint16_t        type;
    uint32_t        ttl;
    uint16_t        pref;               /* MX */
    char           *target;             /* MX exchange, CNAME target;
                                           "" for the root (null MX) and
                                           for other types */
    size_t          len;
    unsigned char  *rdata;              /* raw copy */
};

struct dns_msg {
    uint16_t        id;
    int             rcode;              /* 0 NOERROR, 2 SERVFAIL, 3 NXDOMAIN */
    int             ad, tc;
    char            qname[DNS_NAME_MAX];
    uint16_t        qtype;
    size_t          nan;
    struct dns_msg_rr *an;              /* answer section */
    int             have_soa;           /* SOA in authority */
    uint32_t        neg_ttl;            /* min(SOA ttl, SOA minimum) */
};

/* Parse a whole message; 0, or DNS_EINVAL for a malformed one (any
 * byte string is safe to pass). */
int         dns_msg_parse(const unsigned char *pkt, size_t len,
                struct dns_msg *m);
void        dns_msg_clear(struct dns_msg *m);

struct dns_mx {
    uint16_t        pref;
    char            name[DNS_NAME_MAX];
};
/* Sort by preference; equal preferences in random order (rnd returns a
 * uniform 32-bit value). */
void        dns_mx_order(struct dns_mx *mx, size_t n,
                uint32_t (*rnd)(void *), void *rarg);

/* Tests: replace the clock (ms, monotonic) used for cache expiry. */
void        dns_set_clock(struct dns *d, uint64_t (*now_ms)(void *),
                void *arg);
/* Tests: counters since dns_new(). */
struct dns_stats {
    uint64_t        queries;            /* sent to c-ares */
    uint64_t        cache_hits;
    uint64_t        joined;             /* waited on a query in flight */
    uint64_t        evictions;
    size_t          cached;             /* rrsets in the cache now */
};
void        dns_stats(const struct dns *d, struct dns_stats *st);

#endif /* MTAD_DNS_H */
