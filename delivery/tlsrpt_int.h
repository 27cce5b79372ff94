/*
 * tlsrpt_int.h - the policy record shared by tlsrpt.c (tables, wire) and
 * tlsrpt_report.c (JSON); nothing outside delivery/ includes it.
 */
#ifndef MTAD_TLSRPT_INT_H
#define MTAD_TLSRPT_INT_H

#include <stddef.h>
#include <stdint.h>

#include "delivery/tlsrpt.h"

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
    enum tlsrpt_type      type;
    char                  domain[TLSRPT_DOMAIN_MAX];   /* lower case */
    char                **strings;
    size_t                nstrings;
    uint64_t              ok, fail;
    struct tlsrpt_detail *det;
    size_t                ndet;
    size_t                bytes;    /* what it holds, for the table's cap */
};

/* One policy's block (tlsrpt.h WIRE) appended to out. */
void    tlsrpt_pol_wire(const struct tlsrpt_pol *p, struct buf *out);
/* Every policy of t, ordered by day, domain, type; *n of them; free()
 * the array (not the policies). */
struct tlsrpt_pol **tlsrpt_tab_sorted(const struct tlsrpt_tab *t, size_t *n);

/* tlsrpt_outcome.c: one connection attempt's TLS outcome (mta_session.c):
 * failure NULL or "" for success, else an RFC 8460 result type; ip the
 * MX host's address; reason (optional) a failure-reason-code. */
struct tls_req;
void    tlsrpt_outcome(const struct tls_req *r, const char *failure,
            const char *ip, const char *reason);

#endif /* MTAD_TLSRPT_INT_H */
