/*
 * fuzz_api_http.c - libFuzzer target over the API's HTTP/1.1 request head
 * parser and percent-decoding (api/api_http.c).  `make fuzz` builds and
 * runs it (seeds in tests/fuzz/corpus/api_http/).
 *
 * The first input byte picks max_body (0, 1, 64 KiB or unlimited); the
 * rest is what a client sent.  Checks: the result is 0, -2 or one of the
 * statuses the parser documents, with a printable reason on an error; on
 * 0 the head ends with CRLF CRLF at head_len <= n, the target is a path
 * of visible ASCII, the method is one we serve and a Content-Length is
 * within max_body; -2 only while the head could still come (n below the
 * head limit); every shorter prefix of a complete head answers -2 or an
 * error, never a complete head of another length.  The decoder's output
 * is never longer than its input and holds no NUL.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
fuzz_check_why(const char *why)
{
    size_t n = strlen(why);

    if (n == 0)
        abort();
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)why[i] < 0x20 || (unsigned char)why[i] > 0x7e)
            abort();
}

static int
fuzz_status_ok(int rc)
{
    static const int ok[] = { 0, -2, 400, 411, 413, 414, 431, 501, 505 };

    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        if (rc == ok[i])
            return 1;
    return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint64_t maxes[4] = { 0, 1, 65536, UINT64_MAX };
    static struct api_http_head h, h2;
    static char out[API_MAX_TARGET + 1];
    const char *p, *why;
    uint64_t    max;
    size_t      n;
    int         rc;

    if (size < 1)
        return 0;
    max = maxes[data[0] & 3];
    p = (const char *)data + 1;
    n = size - 1;
    rc = api_http_parse(p, n, max, &h, &why);
    if (!fuzz_status_ok(rc))
        abort();
    if (rc > 0)
        fuzz_check_why(why);
    if (rc == -2 && n >= API_MAX_HEAD)
        abort();
    if (rc == 0) {
        if (h.head_len < 4 || h.head_len > n ||
            memcmp(p + h.head_len - 4, "\r\n\r\n", 4) != 0 ||
            h.target[0] != '/' || h.method < API_GET ||
            h.method > API_DELETE || (h.has_length && h.content_length > max))
            abort();
        for (size_t i = 0; h.target[i] != '\0'; i++)
            if ((unsigned char)h.target[i] <= 0x20 ||
                (unsigned char)h.target[i] >= 0x7f)
                abort();
        for (size_t k = 0; k + 1 < h.head_len; k += 1 + k / 8) {
            int r2 = api_http_parse(p, k, max, &h2, &why);

            if (r2 == 0)
                abort();            /* complete before its end */
        }
        if (api_http_unescape(h.target, strlen(h.target), out, sizeof(out),
            data[0] & 4) == 0 && (strlen(out) > strlen(h.target)))
            abort();
    }
    if (api_http_unescape(p, n, out, sizeof(out), data[0] & 8) == 0 &&
        strlen(out) > n)
        abort();
    return 0;
}
