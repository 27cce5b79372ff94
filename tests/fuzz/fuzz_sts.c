/*
 * fuzz_sts.c - libFuzzer target over the MTA-STS text parsers (sts/): the
 * input is parsed both as a `_mta-sts` TXT record and as a policy file,
 * then every accepted mx pattern is matched against host names taken
 * from the input.  `make fuzz` builds and runs it (seeds in
 * tests/fuzz/corpus/sts/: the RFC 8461 examples and variants).
 *
 * Checks: return codes are 0 or the documented STS_E* codes; an accepted
 * id is 1-32 alphanumerics; an accepted policy has a known mode, max_age
 * within a year, mx patterns that are lower-case LDH names (with an
 * optional leading "*.") each matching a host built from it; every reason
 * is printable ASCII.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sts/sts.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
fuzz_printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f)
            abort();
}


static void
fuzz_pattern(const char *pat)
{
    char   host[STS_NAME_MAX + 8];
    size_t n = strnlen(pat, STS_NAME_MAX), i;

    if (n == 0 || n >= STS_NAME_MAX)
        abort();
    for (i = 0; i < n; i++) {
        char c = pat[i];

        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '.' || (c == '*' && i == 0)))
            abort();
    }
    if (pat[0] == '*') {
        /* "*.d" matches "x.d" and never "d" itself */
        host[0] = 'x';
        memcpy(host + 1, pat + 1, n);
        if ((n <= 254 && !sts_pattern_match(pat, host)) ||
            sts_pattern_match(pat, pat + 2))
            abort();
    } else if (!sts_pattern_match(pat, pat)) {
        abort();
    }
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct sts_policy p;
    char   id[STS_ID_MAX], why[256], host[STS_NAME_MAX];
    size_t i, n;
    int    rc;

    why[0] = '\0';
    rc = sts_txt_parse((const char *)data, size, id, why, sizeof(why));
    if (rc != 0 && rc != STS_EINVAL && rc != STS_ENOTSTS)
        abort();
    fuzz_printable(why);
    if (rc == 0) {
        n = strnlen(id, STS_ID_MAX);
        if (n == 0 || n >= STS_ID_MAX)
            abort();
    }
    rc = sts_policy_parse((const char *)data, size, &p, why, sizeof(why));
    if (rc != 0 && rc != STS_EINVAL)
        abort();
    fuzz_printable(why);
    if (rc != 0)
        return 0;
    if (p.mode != STS_MODE_NONE && p.mode != STS_MODE_TESTING &&
        p.mode != STS_MODE_ENFORCE)
        abort();
    if (p.max_age > STS_MAX_AGE_MAX || p.nmx > STS_MX_MAX ||
        (p.mode != STS_MODE_NONE && p.nmx == 0))
        abort();
    for (i = 0; i < p.nmx; i++)
        fuzz_pattern(p.mx[i]);
    /* the input's first line as a host name: no crash, 0 or 1 */
    n = 0;
    while (n < size && n + 1 < sizeof(host) && data[n] != '\n')
        n++;
    memcpy(host, data, n);
    host[n] = '\0';
    rc = sts_mx_match(&p, host);
    if (rc != 0 && rc != 1)
        abort();
    return 0;
}
