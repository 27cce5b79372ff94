/*
 * fuzz_metrics.c - libFuzzer target over the request parser of the
 * metrics listener (master/metrics_req.c): the bytes any client that
 * reaches metrics.listen sends.
 *
 * Input: byte 0 picks the buffer size (max: 1 + 32 * byte 0, as the
 * listener's 8191 but small enough to reach 431 often); the rest, cut to
 * max, is what the client sent.
 *
 * Checks: the answer is 0 (wait) or one of 200, 400, 404, 405, 431, and
 * the same as a reference written the long way (the first line copied
 * and split with sscanf); head only with HEAD, never with 405; 0 only
 * while no empty line has come and the buffer is not full; the answer to
 * every prefix is 0 until the verdict and the verdict after it (how the
 * bytes were split into reads never matters, nor what follows the
 * request line).  The answers metrics.c sends for these codes are fixed
 * texts: nothing of the request is echoed.
 * Build and run: make fuzz (see tests/fuzz/run.sh).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "master/metrics_req.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ref_ended - an empty line (CRLF CRLF or LF LF) somewhere in p. */
static int
ref_ended(const char *p, size_t n)
{
    size_t i;

    for (i = 0; i + 1 < n; i++) {
        if (p[i] == '\n' && p[i + 1] == '\n')
            return 1;
        if (i + 3 < n && memcmp(p + i, "\r\n\r\n", 4) == 0)
            return 1;
    }
    return 0;
}


static int
ref_parse(const char *p, size_t n, size_t max, int *head)
{
    char  *line, *method, *path;
    size_t ln, i;
    int    rc;

    *head = 0;
    if (!ref_ended(p, n))
        return n >= max ? 431 : 0;
    for (ln = 0; p[ln] != '\n'; ln++)
        ;
    if (ln > 0 && p[ln - 1] == '\r')
        ln--;
    line = malloc(ln + 1);
    method = malloc(ln + 1);
    path = malloc(ln + 1);
    if (line == NULL || method == NULL || path == NULL)
        abort();
    memcpy(line, p, ln);
    line[ln] = '\0';
    rc = 0;
    for (i = 0; i < ln; i++) {
        if (line[i] == '\t')
            line[i] = ' ';
        else if ((unsigned char)line[i] < 0x20)
            rc = 400;
    }
    if (rc == 0 && sscanf(line, "%s %s", method, path) != 2)
        rc = 400;
    if (rc == 0) {
        *head = strcmp(method, "HEAD") == 0;
        if (strcmp(method, "GET") != 0 && !*head)
            rc = 405;
        else if (strcmp(path, "/metrics") == 0 ||
            strncmp(path, "/metrics?", 9) == 0)
            rc = 200;
        else
            rc = 404;
    }
    free(line);
    free(method);
    free(path);
    return rc;
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t max, n, k, step;
    char  *p;
    int    rc, rk, ref, head, hk, rhead;

    if (size < 1)
        return 0;
    max = 1 + 32 * (size_t)data[0];
    n = size - 1 < max ? size - 1 : max;
    p = malloc(n ? n : 1);              /* exact size: ASan sees overreads */
    if (p == NULL)
        abort();
    memcpy(p, data + 1, n);
    rc = metrics_req_parse(p, n, max, &head);
    if (rc != 0 && rc != 200 && rc != 400 && rc != 404 && rc != 405 &&
        rc != 431)
        abort();
    ref = ref_parse(p, n, max, &rhead);
    if (rc != ref || head != rhead || (head && rc == 405))
        abort();
    if ((rc == 0) != (!ref_ended(p, n) && n < max))
        abort();
    /* prefixes: 0 until the verdict, then the verdict */
    step = 1 + n / 128;
    for (k = 0, rk = 0; k < n; k += step) {
        int r = metrics_req_parse(p, k, max, &hk);

        if (r == 0 && rk != 0)
            abort();                    /* decided, then undecided */
        if (r != 0 && (r != rc || hk != head))
            abort();
        rk = r;
    }
    free(p);
    return 0;
}
