/*
 * resolve_tls.c - the TLS policy module's verdicts applied to the hops of
 * one transaction (resolve.c calls it once the hops are known): what an
 * MTA-STS policy (tlspol.h) does to the MX hosts.  No I/O; unit-tested in
 * tests/unit/test_mta_sts.c.
 */
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "delivery/mta.h"
#include "delivery/resolve.h"
#include "tlspol/tlspol.h"

int
resolve_sts_hops(const struct sts_policy *p, const char *domain,
    struct mta_hop *hop, size_t *n, char *reply, size_t replysz)
{
    size_t i, kept = 0, miss = 0;
    char   first[256] = "";

    if (p == NULL || p->mode == STS_MODE_NONE)
        return 0;
    for (i = 0; i < *n; i++) {
        struct tls_req *r = &hop[i].tls;
        int             ok = sts_mx_match(p, hop[i].name);

        if (r->tlsa != NULL)        /* DANE wins (RFC 8461 2) */
            ok = 1;
        else if (p->mode == STS_MODE_ENFORCE)
            r->sts_enforce = 1;     /* STARTTLS, CA-verified MX name */
        else
            r->sts_testing = 1;     /* check and report, deliver anyway */
        if (!ok && miss++ == 0)
            util_strlcpy(first, hop[i].name, sizeof(first));
        if (p->mode == STS_MODE_TESTING || ok) {
            if (kept != i)
                hop[kept] = hop[i];
            kept++;
        }
    }
    if (miss > 0)
        log_info("mta-sts: %s: MX host %s%s does not match the policy "
            "(mode %s)%s", domain, first, miss > 1 ? " and others" : "",
            sts_mode_name(p->mode), p->mode == STS_MODE_ENFORCE ?
            ": not used" : ": delivering anyway");
    *n = kept;
    if (kept == 0) {
        snprintf(reply, replysz, "451 4.7.5 MTA-STS policy of %.200s "
            "(enforce): no MX host matches (%.200s)", domain, first);
        return -1;
    }
    return 0;
}
