/*
 * fuzz_dns.c - libFuzzer target over the DNS answer handling mtad writes
 * itself (dns/msg.c): dns_msg_parse(), then MX ordering, TLSA and TXT
 * rdata on whatever it accepted.  `make fuzz` builds and runs it (with
 * every other target; seeds in tests/fuzz/corpus/).
 *
 * Seeds (tests/fuzz/corpus/dns/) are real answers of nsd for the test zone
 * of tests/integration/mtadtest.py.
 *
 * Checks: the parser returns 0 or DNS_EINVAL and leaves nothing allocated
 * on failure; on success every name is NUL-terminated within DNS_NAME_MAX
 * and holds only printable ASCII without blanks (odd bytes come out as
 * \DDD), no more records than the header announced, A/AAAA of exact size;
 * MX ordering keeps every record and sorts by preference.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dns/dns.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
fuzz_name_ok(const char *s)
{
    size_t n = strnlen(s, DNS_NAME_MAX);
    size_t i;

    if (n >= DNS_NAME_MAX)
        abort();
    for (i = 0; i < n; i++)
        if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f)
            abort();
}


static uint32_t
fuzz_rand(void *arg)
{
    (void)arg;
    return (uint32_t)rand();
}


static void
fuzz_mx(const struct dns_msg *m)
{
    struct dns_mx mx[64];
    size_t  i, n = 0, sum_in = 0, sum_out = 0;

    for (i = 0; i < m->nan && n < 64; i++)
        if (m->an[i].type == DNS_T_MX) {
            mx[n].pref = m->an[i].pref;
            snprintf(mx[n].name, sizeof(mx[n].name), "%s", m->an[i].target);
            sum_in += mx[n].pref;
            n++;
        }
    dns_mx_order(mx, n, fuzz_rand, NULL);
    for (i = 0; i < n; i++) {
        sum_out += mx[i].pref;
        if (i > 0 && mx[i - 1].pref > mx[i].pref)
            abort();
        fuzz_name_ok(mx[i].name);
    }
    if (sum_in != sum_out)
        abort();
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct dns_msg  m;
    struct dns_tlsa t;
    struct dns_rr   rr;
    char            txt[512];
    size_t          i;
    int             rc;

    rc = dns_msg_parse(data, size, &m);
    if (rc != 0) {
        if (rc != DNS_EINVAL || m.an != NULL || m.nan != 0)
            abort();
        return 0;
    }
    if (size < 12 || m.nan > (size_t)(data[6] << 8 | data[7]))
        abort();
    fuzz_name_ok(m.qname);
    for (i = 0; i < m.nan; i++) {
        const struct dns_msg_rr *r = &m.an[i];

        fuzz_name_ok(r->owner);
        fuzz_name_ok(r->target);
        if ((r->type == DNS_T_A && r->len != 4) ||
            (r->type == DNS_T_AAAA && r->len != 16) || r->len > size)
            abort();
        rr.type = r->type;
        rr.ttl = r->ttl;
        rr.len = r->len;
        rr.rdata = r->rdata;
        if (r->ttl & 0x80000000u)
            abort();
        if (dns_tlsa_parse(&rr, &t) == 0 && t.data + t.len != r->rdata + r->len)
            abort();
        if (dns_txt_join(&rr, txt, sizeof(txt)) == 0 &&
            strlen(txt) >= sizeof(txt))
            abort();
    }
    fuzz_mx(&m);
    dns_msg_clear(&m);
    return 0;
}
