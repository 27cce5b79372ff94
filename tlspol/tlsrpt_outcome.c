/*
 * tlsrpt_outcome.c - the TLS client's outcome (tlspol.h) as a TLS-RPT
 * event (tlspol.h): which policy applied and its strings.
 *
 * PURPOSE   One call per connection attempt's TLS outcome from
 *           delivery/mta_tls.c, so that the TLS code needs to know
 *           nothing of TLS-RPT's types.
 * CONTRACT  The policy is "tlsa" when the host had usable TLSA records
 *           (their presentation form, "3 1 1 <hex>", are the policy
 *           strings), "sts" under an MTA-STS policy (enforce or testing;
 *           its lines are not in struct tls_req, so no policy strings
 *           yet), else "no-policy-found".  Formats only when a TLSA policy applied
 *           (once per connection, not per message); does nothing while
 *           tlsrpt.enabled is off.
 * FAILURE   None.
 */
#include <stdio.h>
#include <string.h>

#include "dns/dns.h"
#include "tlspol/tlspol_int.h"

/* tlsrpt_tlsa_string - one TLSA record as "usage selector mtype hex". */
static void
tlsrpt_tlsa_string(const struct dns_rr *rr, char *out, size_t outsz)
{
    static const char hex[] = "0123456789abcdef";
    struct dns_tlsa   t;
    size_t            o;

    if (dns_tlsa_parse(rr, &t) != 0) {
        snprintf(out, outsz, "(unparsable TLSA record)");
        return;
    }
    o = (size_t)snprintf(out, outsz, "%u %u %u ", t.usage, t.selector,
        t.mtype);
    for (size_t i = 0; i < t.len && o + 3 <= outsz; i++) {
        out[o++] = hex[t.data[i] >> 4];
        out[o++] = hex[t.data[i] & 15];
    }
    out[o < outsz ? o : outsz - 1] = '\0';
}


void
tls_rpt_outcome(const struct tls_req *r, const char *failure, const char *ip,
    const char *reason)
{
    static char          s[TLS_RPT_MAX_STRINGS][TLS_RPT_MAX_STRING];
    const char          *sv[TLS_RPT_MAX_STRINGS];
    struct tls_rpt_event  ev;

    if (!tls_rpt_enabled() || r->policy_domain[0] == '\0')
        return;
    memset(&ev, 0, sizeof(ev));
    ev.domain = r->policy_domain;
    ev.result = failure;
    ev.mx = r->verify_name;
    ev.ip = ip;
    ev.reason = failure != NULL && failure[0] != '\0' ? reason : NULL;
    if (r->tlsa != NULL && r->tlsa->n > 0) {
        ev.type = TLS_RPT_TLSA;
        for (size_t i = 0; i < r->tlsa->n && i < TLS_RPT_MAX_STRINGS; i++) {
            tlsrpt_tlsa_string(&r->tlsa->rr[i], s[i], sizeof(s[i]));
            sv[i] = s[i];
            ev.nstrings++;
        }
        ev.strings = sv;
    } else if (r->sts_enforce || r->sts_testing) {
        ev.type = TLS_RPT_STS;
    } else {
        ev.type = TLS_RPT_NOPOLICY;
    }
    tls_rpt_record(&ev);
}
