/*
 * sts_policy.c - the pure decisions of MTA-STS in delivery (RFC 8461):
 * which TXT record counts, when a cached policy is used or fetched again,
 * and the Content-Type check.  No I/O;
 * unit-tested in tests/unit/test_mta_sts.c.  See sts.h.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/util.h"
#include "tlspol/tlspol.h"

enum tls_sts_action
tls_sts_decide(int have, const char *cached_id, uint64_t expires_ms,
    uint64_t now_ms, enum tls_sts_txt txt, const char *txt_id)
{
    int fresh = have && now_ms < expires_ms;

    if (txt == TLS_STS_TXT_ID) {
        if (fresh && strcmp(cached_id, txt_id) == 0)
            return TLS_STS_USE_CACHED;
        return TLS_STS_FETCH;          /* new id, expired, or never fetched */
    }
    /* RFC 8461 5.1: no live policy but an unexpired cached one: use it */
    return fresh ? TLS_STS_USE_CACHED : TLS_STS_NO_POLICY;
}


enum tls_sts_txt
tls_sts_txt_pick(const char *const *txt, const size_t *len, size_t n, char *id,
    char *why, size_t whysz)
{
    char   one[STS_ID_MAX], w[256] = "";
    size_t i, valid = 0, sts = 0;

    for (i = 0; i < n; i++) {
        int rc = sts_txt_parse(txt[i], len[i], one, w, sizeof(w));

        if (rc == STS_ENOTSTS)
            continue;
        sts++;
        if (rc == 0 && valid++ == 0)
            memcpy(id, one, sizeof(one));
        else if (rc != 0)
            snprintf(why, whysz, "invalid TXT record: %s", w);
    }
    if (sts == 1 && valid == 1)
        return TLS_STS_TXT_ID;
    if (sts == 0)
        snprintf(why, whysz, "no v=STSv1 TXT record");
    else if (sts > 1)
        snprintf(why, whysz, "%zu v=STSv1 TXT records (RFC 8461 3.1: "
            "exactly one)", sts);
    return TLS_STS_TXT_NONE;
}


int
tls_sts_content_type_ok(const char *ct)
{
    if (ct == NULL || strncasecmp(ct, "text/plain", 10) != 0)
        return 0;
    return ct[10] == '\0' || ct[10] == ';' || ct[10] == ' ' ||
        ct[10] == '\t';
}

