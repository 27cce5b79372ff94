/*
 * tlspol_int.h - what the files of tlspol/ share and nothing outside
 * includes: TLS-RPT's policy record (tlsrpt.c: tables, wire;
 * tlsrpt_report.c: JSON) and the MTA-STS cache's entries and fetches
 * (sts.c: the cache; sts_fetch.c: libcurl on the loop).
 */
#ifndef MTAD_TLSPOL_INT_H
#define MTAD_TLSPOL_INT_H

#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#include "common/ev.h"
#include "dns/dns.h"
#include "tlspol/tlspol.h"

struct buf;

struct tlsrpt_detail {
    char     result[64];            /* RFC 8460 result-type */
    char     mx[256];               /* receiving-mx-hostname */
    char     ip[64];                /* receiving-ip */
    char     reason[128];           /* failure-reason-code */
    uint64_t n;                     /* failed-session-count */
};

struct tlsrpt_pol {
    struct tlsrpt_pol    *next;     /* hash chain */
    uint64_t              hash;
    uint32_t              day;
    enum tls_rpt_type      type;
    char                  domain[TLS_RPT_DOMAIN_MAX];   /* lower case */
    char                **strings;
    size_t                nstrings;
    uint64_t              ok, fail;
    struct tlsrpt_detail *det;
    size_t                ndet;
    size_t                bytes;    /* what it holds, for the table's cap */
};

/* One policy's block (tlspol.h, TLS-RPT WIRE) appended to out. */
void    tlsrpt_pol_wire(const struct tlsrpt_pol *p, struct buf *out);
/* Every policy of t, ordered by day, domain, type; *n of them; free()
 * the array (not the policies). */
struct tlsrpt_pol **tlsrpt_tab_sorted(const struct tls_rpt_tab *t, size_t *n);

/* ---- MTA-STS: the cache (sts.c) and its fetches (sts_fetch.c) ---- */

#define TLS_STS_BUCKETS   1024
#define TLS_STS_CA_MAX    (8 * 1024 * 1024)  /* larger: a mistake */
#define TLS_STS_TXT_MAX   8                  /* TXT records looked at */
#define TLS_STS_SYSTEM_CA "/etc/ssl/certs/ca-certificates.crt"
#define TLS_STS_RETRY_MS  (5 * 60 * 1000)    /* after a failed fetch, per id */

enum { E_IDLE = 0, E_TXT, E_ADDR, E_FETCH, E_POST };

struct tls_sts_entry;

struct tls_sts_req {
    struct tls_sts_entry *e;
    struct tls_sts_req   *next, *prev;
    tls_sts_fn           *fn;
    void              *arg;
};

struct tls_sts_fetch {
    struct tls_sts_entry *e;
    CURL              *easy;
    struct curl_slist *resolve;
    char              *body;
    size_t             len;
    int                too_big;
    char               err[CURL_ERROR_SIZE];
};

struct tls_sts_entry {
    struct tls_sts       *s;
    struct tls_sts_entry *hnext;               /* hash chain */
    struct tls_sts_entry *older, *newer;       /* LRU list */
    char               domain[DNS_NAME_MAX];
    /* the cached policy */
    int                have;
    enum sts_mode      mode;
    uint32_t           max_age;
    size_t             nmx;
    char              *mx;                  /* nmx NUL-ended patterns */
    char               id[STS_ID_MAX];
    uint64_t           expires_ms;          /* ev_now() scale */
    /* the refresh in flight */
    int                state;
    struct dns_req    *dreq;
    struct tls_sts_fetch *f;
    char               txt_id[STS_ID_MAX];
    char               fail_id[STS_ID_MAX]; /* the id whose fetch failed */
    uint64_t           retry_ms;            /* not fetched again before */
    struct tls_sts_req   *wait;                /* waiting callers */
    int                use;                 /* the outcome: cached or not */
    char               why[320];
    struct ev_timer    post;                /* E_POST: complete from loop */
};

struct tls_sts {
    struct ev_loop     *loop;
    struct dns         *dns;
    CURLM              *multi;
    struct ev_timer     ctimer;             /* libcurl's timeout */
    char               *ca;
    size_t              calen;
    unsigned            port;
    uint64_t            timeout_ms;
    struct tls_sts_entry  *bucket[TLS_STS_BUCKETS];
    struct tls_sts_entry  *newest, *oldest;
    size_t              nentries;
    struct sts_policy   scratch;            /* the policy handed out */
};

/* sts.c: the cache side */
void    tls_sts_store(struct tls_sts_entry *e, const struct sts_policy *p,
            uint64_t now);
void    tls_sts_complete(struct tls_sts_entry *e);
void    tls_sts_fallback(struct tls_sts_entry *e, const char *why);
void    tls_sts_failed(struct tls_sts_entry *e, const char *why);

/* sts_fetch.c: libcurl on the ev loop */
int     tls_sts_curl_init(struct tls_sts *s, const char *ca_file, char *why,
            size_t whysz);
void    tls_sts_curl_free(struct tls_sts *s);
int     tls_sts_fetch_start(struct tls_sts_entry *e, const struct dns_host *h);
void    tls_sts_fetch_free(struct tls_sts_fetch *f);

#endif /* MTAD_TLSPOL_INT_H */
