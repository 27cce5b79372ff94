/*
 * fuzz_proxy.c - libFuzzer target over the PROXY protocol parser
 * (proxy/proxy.c).  `make fuzz` builds and runs it (with
 * every other target; seeds in tests/fuzz/corpus/).
 *
 * The first input byte picks the version mask (v1, v2 or auto); the rest
 * is the connection's first bytes.  Checks: the result is one of the
 * three codes; on PROXY_EBAD a non-empty printable reason; on PROXY_OK a
 * sane length (v1: within the input and at most 107 bytes, ending in
 * CRLF; v2: 16 + the length field) and, unless local, an AF_INET/AF_INET6
 * source; every prefix of the input that is shorter than the verdict
 * point answers PROXY_AGAIN or the same verdict (feeding byte by byte
 * never decides differently from feeding at once); PROXY_AGAIN never
 * comes at PROXY_NEED_MAX bytes or more.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>

#include "proxy/proxy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
fuzz_check_why(const char *why)
{
    size_t i, n = strlen(why);

    if (n == 0)
        abort();
    for (i = 0; i < n; i++)
        if ((unsigned char)why[i] < 0x20 || (unsigned char)why[i] > 0x7e)
            abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const unsigned masks[3] = { PROXY_V1, PROXY_V2, PROXY_AUTO };
    struct proxy_hdr h, h2;
    const char      *why;
    unsigned         mask;
    size_t           n, k;
    int              rc, rk;

    if (size < 1)
        return 0;
    mask = masks[data[0] % 3];
    data++;
    n = size - 1;
    rc = proxy_parse(data, n, mask, &h, &why);
    if (rc != PROXY_OK && rc != PROXY_AGAIN && rc != PROXY_EBAD)
        abort();
    if (rc == PROXY_AGAIN && n >= PROXY_NEED_MAX)
        abort();
    if (rc == PROXY_EBAD)
        fuzz_check_why(why);
    if (rc == PROXY_OK) {
        if (h.version == 1 && (h.len > n || h.len > PROXY_V1_MAX ||
            h.len < 8 || data[h.len - 2] != '\r' || data[h.len - 1] != '\n'))
            abort();
        if (h.version == 2 && (n < PROXY_V2_HEAD || h.len !=
            PROXY_V2_HEAD + (((size_t)data[14] << 8) | data[15])))
            abort();
        if (h.version != 1 && h.version != 2)
            abort();
        if (!h.local && h.src.ss_family != AF_INET &&
            h.src.ss_family != AF_INET6)
            abort();
    }
    /* Prefixes: AGAIN until the verdict, which then never changes. */
    for (k = 0; k < n; k++) {
        rk = proxy_parse(data, k, mask, &h2, &why);
        if (rk == PROXY_AGAIN)
            continue;
        if (rk != rc && !(rc == PROXY_AGAIN))
            abort();
        if (rc == PROXY_AGAIN)
            abort();                /* a shorter input decided, the whole not */
        if (rk == PROXY_OK && (h2.len != h.len || h2.version != h.version ||
            h2.local != h.local || memcmp(&h2.src, &h.src, sizeof(h.src))))
            abort();
    }
    return 0;
}
